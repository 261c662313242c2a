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
