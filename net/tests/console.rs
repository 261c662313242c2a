//! The console over real HTTP: the binary prints its URL after the
//! listening line, `/metrics` counts what a client did, the cluster and
//! partition pages answer, an unknown path, topic or partition is 404. (tests/test_metrics.py checks the numbers with real Kafka clients
//! and Prometheus' own parser, and that `none` opens nothing.)

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::Bytes;
use common::{Broker, IO_TIMEOUT};

/// One HTTP/1.1 exchange: (status code, body).
fn get(url: &str, path: &str) -> (u16, String) {
    let authority = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix('/'))
        .unwrap_or_else(|| panic!("a console URL, got {url:?}"));
    let mut stream = TcpStream::connect(authority).expect("connect to the console");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("a header and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line, got {head:?}"));
    (status, body.to_string())
}

/// The value of the sample `series` (name and labels, as rendered).
fn sample(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{page}"))
        .parse()
        .unwrap()
}

#[test]
fn metrics_count_a_produce_and_unknown_paths_are_404() {
    let broker = Broker::start_with("console", &["--set", "doze.console.listen=127.0.0.1:0"]);
    let url = broker
        .console
        .clone()
        .expect("the console's URL is printed");
    let mut client = broker.connect();
    common::create_topic(&mut client, "metered");
    common::produce(
        &mut client,
        "metered",
        &[Bytes::from_static(b"a"), Bytes::from_static(b"b")],
    );
    common::produce(&mut client, "metered", &[Bytes::from_static(b"c")]);

    // A request's latency is recorded once its response is flushed, which
    // may come a moment after the client has read it: scrape until the
    // second Produce is counted (bounded), then check everything.
    let produce = "doze_request_duration_seconds_count{request=\"Produce\"}";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (status, page) = loop {
        let (status, page) = get(&url, "/metrics");
        let counted = page.lines().any(|line| {
            line.strip_prefix(produce)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .is_some_and(|n| n >= 2.0)
        });
        if status != 200 || counted || std::time::Instant::now() > deadline {
            break (status, page);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status, 200, "{page}");
    let topic = "{topic=\"metered\"}";
    assert_eq!(
        sample(&page, &format!("doze_topic_produced_records_total{topic}")),
        3.0
    );
    assert!(sample(&page, &format!("doze_topic_produced_bytes_total{topic}")) > 0.0);
    assert_eq!(sample(&page, produce), 2.0);
    assert!(sample(&page, "doze_fsync_duration_seconds_count") >= 1.0);
    assert!(sample(&page, "doze_group_commit_appends_sum") >= 2.0);
    assert_eq!(sample(&page, "doze_connections_open"), 1.0);
    assert_eq!(sample(&page, "doze_connections_accepted_total"), 1.0);
    // The core handled the boot, the produce and its sync: some time,
    // and never more than the broker has been up (this test is seconds).
    let busy = sample(&page, "doze_core_busy_seconds_total");
    assert!(busy > 0.0 && busy < 60.0, "core busy {busy} s");
    assert_eq!(
        sample(
            &page,
            "doze_partition_lso_lag_offsets{topic=\"metered\",partition=\"0\"}"
        ),
        0.0
    );

    // The pages (tests/test_console.py drives them in Chromium).
    let (status, cluster) = get(&url, "/");
    assert_eq!(status, 200, "{cluster}");
    assert!(
        cluster.contains("data-topic=\"metered\" data-partition=\"0\""),
        "{cluster}"
    );
    let (status, partition) = get(&url, "/topics/metered/0");
    assert_eq!(status, 200, "{partition}");
    assert!(partition.contains("class=\"rec\""), "{partition}");
    assert_eq!(get(&url, "/topics/metered/7").0, 404);
    assert_eq!(get(&url, "/topics/unknown/0").0, 404);
    assert_eq!(get(&url, "/nothing-here").0, 404);
    assert_eq!(get(&url, "/metrics/").0, 404);
    drop(client);
}

/// Records in the batch of `a_page_of_a_batch_of_millions_reads_only_its_records`:
/// the most one batch may hold (`limits::BATCH_RECORDS_MAX`).
const MANY_RECORDS: i32 = doze_core::limits::BATCH_RECORDS_MAX as i32;
/// What one page view may add to the broker's peak RSS. When a batch's
/// records were read whole, a view of that batch took +341 MiB (debug
/// build); read one at a time, stopping at the page's 500th, +6 to +7 MiB.
const PAGE_VIEW_RSS_GROWTH_KIB_MAX: u64 = 32 * 1024;

/// A stored batch of a million tiny records (10 MB plain, zstd'd): its
/// partition page shows the first 500 with a link on to the next page, and
/// a page from the middle of the batch shows its 500; each view costs the
/// broker a bounded amount of memory, not one growing with the batch.
#[test]
fn a_page_of_a_batch_of_millions_reads_only_its_records() {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{CreateTopicsRequest, ProduceRequest, ResponseKind};
    use kafka_protocol::protocol::StrBytes;

    let broker = Broker::start_with(
        "console-many",
        &["--set", "doze.console.listen=127.0.0.1:0"],
    );
    let url = broker.console.clone().expect("the console's URL");
    let mut client = broker.connect();
    let batch = common::tiny_records_batch(0, MANY_RECORDS, 4, 1_700_000_000_000);
    let message_max = 8 << 20;
    assert!(batch.len() < message_max, "{} bytes", batch.len());
    let req = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(common::topic("many"))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(vec![CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("max.message.bytes"))
            .with_value(Some(StrBytes::from_string(message_max.to_string())))])]);
    match client.request(7, &req) {
        ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0, "{r:?}"),
        other => panic!("{other:?}"),
    }
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(common::topic("many"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(batch)))])]);
    match client.request(9, &req) {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            assert_eq!(p.error_code, 0, "{:?}", p.error_message);
        }
        other => panic!("{other:?}"),
    }

    let pid = broker.pid();
    // What a page view adds to the broker's peak: the peak is reset to the
    // RSS of the moment, then read after the view.
    let view = |path: &str| {
        common::reset_peak_rss(pid);
        let before = common::rss_kib(pid);
        let (status, page) = get(&url, path);
        let growth = common::peak_rss_kib(pid).saturating_sub(before);
        eprintln!("{path}: peak RSS +{growth} KiB (from {before} KiB)");
        assert_eq!(status, 200, "{page}");
        (page, growth)
    };
    // The offsets of the records listed: a read_uncommitted reader's
    // column, then a read_committed one's (the batch is delivered to both).
    let offsets = |page: &str| -> Vec<i64> {
        page.split("<li class=\"rec\" data-offset=\"")
            .skip(1)
            .map(|rest| rest.split('"').next().unwrap().parse().unwrap())
            .collect()
    };
    let twice = |from: i64| -> Vec<i64> { (from..from + 500).chain(from..from + 500).collect() };

    let (first, growth_first) = view("/topics/many/0");
    assert_eq!(offsets(&first), twice(0));
    let left = MANY_RECORDS - 500;
    assert!(
        first.contains(&format!("({left} more on the next page)")),
        "{first}"
    );
    assert!(
        first.contains("<a rel=\"next\" href=\"/topics/many/0?from=500\">"),
        "{first}"
    );

    let middle = i64::from(MANY_RECORDS / 2);
    let (page, growth_middle) = view(&format!("/topics/many/0?from={middle}"));
    assert_eq!(offsets(&page), twice(middle));
    assert!(
        page.contains(&format!("({middle} before this page)")),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "<a rel=\"next\" href=\"/topics/many/0?from={}\">",
            middle + 500
        )),
        "{page}"
    );

    for growth in [growth_first, growth_middle] {
        assert!(
            growth < PAGE_VIEW_RSS_GROWTH_KIB_MAX,
            "a page view grew the broker's peak RSS by {growth} KiB \
             (at most {PAGE_VIEW_RSS_GROWTH_KIB_MAX} expected)"
        );
    }
    drop(client);
}
