//! `/metrics`: the broker's numbers in Prometheus' text exposition format
//! (version 0.0.4, what every Prometheus-compatible scraper reads).
//!
//! Two sources. The core's snapshot (`doze_core::metrics`): bytes and
//! records per topic, transactions, LSO lag, consumer lag, asked of the
//! broker task per scrape. And what only the driver can measure, kept here
//! in atomics (`NetMetrics`) by whoever sees it happen:
//! - request latency per API, from the frame read to the response flushed
//!   (the connection writers, `conn.rs`);
//! - fsync latency and what each group commit covered (the disk worker's
//!   syncer, `disk.rs`);
//! - connections open and accepted (the acceptors, `server.rs`).
//!
//! Rendered by hand, not with the `prometheus-client` crate: its histogram
//! takes a lock for every observation and its label families hash the
//! labels on every lookup, where here a response written costs a bucket
//! search and two relaxed atomic adds in a table indexed by API key; and it
//! writes OpenMetrics text, where the plain format below is what every
//! scraper takes. The format is small: `# HELP` and `# TYPE` lines, then
//! one `name{labels} value` line per sample; a histogram is its cumulative
//! `_bucket{le="..."}` samples (the last `+Inf`), `_sum` and `_count`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use doze_core::metrics::Snapshot;
use doze_core::versions;

/// The Content-Type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const NANOS_PER_SECOND: f64 = 1e9;
const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// Request latency buckets, in nanoseconds: from a metadata answer (tens of
/// microseconds) to a fetch waiting its longest (`FETCH_WAIT_MS_MAX`, 60 s).
const REQUEST_BOUNDS_NS: &[u64] = &[
    100 * US,
    250 * US,
    500 * US,
    MS,
    2_500 * US,
    5 * MS,
    10 * MS,
    25 * MS,
    50 * MS,
    100 * MS,
    250 * MS,
    500 * MS,
    1_000 * MS,
    2_500 * MS,
    5_000 * MS,
    10_000 * MS,
    30_000 * MS,
    60_000 * MS,
];

/// Fsync latency buckets, in nanoseconds: a fast NVMe (tens of
/// microseconds) to a disk in trouble (seconds).
const FSYNC_BOUNDS_NS: &[u64] = &[
    50 * US,
    100 * US,
    250 * US,
    500 * US,
    MS,
    2_500 * US,
    5 * MS,
    10 * MS,
    25 * MS,
    50 * MS,
    100 * MS,
    250 * MS,
    500 * MS,
    1_000 * MS,
    2_500 * MS,
    5_000 * MS,
    10_000 * MS,
];

/// Appends per group commit: powers of two up to 4096; a larger round
/// counts in +Inf. Zero: a sync of renames or deletions only.
const APPENDS_BOUNDS: &[u64] = &[0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/// Bytes per group commit: powers of four from 1 KiB to 256 MiB.
const BYTES_BOUNDS: &[u64] = &[
    0,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
];

/// A histogram with fixed buckets, observed from any thread without a lock.
pub struct Histogram {
    /// Inclusive upper bounds, ascending, in the unit observed (nanoseconds,
    /// appends, bytes).
    bounds: &'static [u64],
    /// Observations per bucket, not cumulative: one per bound, then one for
    /// those above the last (`+Inf`). Rendering adds them up.
    buckets: Box<[AtomicU64]>,
    /// Sum of the observations, in the unit observed.
    sum: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [u64]) -> Self {
        assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "histogram bounds must ascend"
        );
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    fn observe_duration(&self, elapsed: Duration) {
        self.observe(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The counts as read now. Each bucket is read once and the count is
    /// their sum, so the rendered buckets ascend and `+Inf` equals the count
    /// even while observations land (the sum may be one observation ahead).
    fn read(&self) -> (Vec<u64>, u64) {
        let counts = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        (counts, self.sum.load(Ordering::Relaxed))
    }

    fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }
}

/// One API's request latency.
struct ApiLatency {
    /// Kafka's name of the API (`Produce`), as its `request` metric tag.
    name: String,
    histogram: Histogram,
}

/// The driver's own numbers. One per server; shared by `Arc`.
pub struct NetMetrics {
    /// Indexed by API key; `None` for keys the broker does not serve (a
    /// request with one is closed, never answered).
    requests: Vec<Option<ApiLatency>>,
    /// One group commit's fdatasyncs and directory fsyncs, in nanoseconds.
    fsync: Histogram,
    /// Batches and markers appended to `.log` files since the previous
    /// group commit, that one made durable.
    group_commit_appends: Histogram,
    /// Their bytes.
    group_commit_bytes: Histogram,
    connections_accepted: AtomicU64,
    connections_open: AtomicU64,
    /// Nanoseconds spent in the core and carrying out its outputs, on the
    /// broker task or a storage worker's thread (`server::SharedDriver`):
    /// one of them at a time does the core's work, so this over the wall
    /// time is how near the core is to being the bottleneck.
    core_busy_ns: AtomicU64,
    /// Produce batches recompressed on connection tasks for their topic's
    /// compression.type (`produce_prep`), which the core then took as they were.
    batches_recompressed: AtomicU64,
}

impl Default for NetMetrics {
    fn default() -> Self {
        let key_max = versions::SUPPORTED
            .iter()
            .map(|(key, _, _)| *key as i16)
            .max()
            .unwrap_or(0);
        let mut requests: Vec<Option<ApiLatency>> = (0..=key_max).map(|_| None).collect();
        for (key, _, _) in versions::SUPPORTED {
            requests[*key as i16 as usize] = Some(ApiLatency {
                name: format!("{key:?}"),
                histogram: Histogram::new(REQUEST_BOUNDS_NS),
            });
        }
        Self {
            requests,
            fsync: Histogram::new(FSYNC_BOUNDS_NS),
            group_commit_appends: Histogram::new(APPENDS_BOUNDS),
            group_commit_bytes: Histogram::new(BYTES_BOUNDS),
            connections_accepted: AtomicU64::new(0),
            connections_open: AtomicU64::new(0),
            core_busy_ns: AtomicU64::new(0),
            batches_recompressed: AtomicU64::new(0),
        }
    }
}

impl NetMetrics {
    /// A response to a request of `api_key` was written, `elapsed` after
    /// the request was read. A key the broker does not serve is ignored.
    pub fn request_done(&self, api_key: i16, elapsed: Duration) {
        let api = usize::try_from(api_key)
            .ok()
            .and_then(|i| self.requests.get(i))
            .and_then(Option::as_ref);
        if let Some(api) = api {
            api.histogram.observe_duration(elapsed);
        }
    }

    /// One group commit took `elapsed` and made `appends` log appends of
    /// `bytes` bytes durable.
    pub fn group_commit(&self, elapsed: Duration, appends: u64, bytes: u64) {
        self.fsync.observe_duration(elapsed);
        self.group_commit_appends.observe(appends);
        self.group_commit_bytes.observe(bytes);
    }

    /// Group commits measured, and the appends and bytes they covered.
    #[cfg(all(test, not(madsim)))]
    pub(crate) fn group_commit_totals(&self) -> (u64, u64, u64) {
        let appends = self.group_commit_appends.read().1;
        let bytes = self.group_commit_bytes.read().1;
        (self.fsync.count(), appends, bytes)
    }

    /// `elapsed` went to one input to the core (on whichever thread).
    pub fn core_busy(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.core_busy_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// A connection task recompressed `batches` Produce batches.
    pub fn batches_recompressed(&self, batches: usize) {
        let n = u64::try_from(batches).unwrap_or(u64::MAX);
        self.batches_recompressed.fetch_add(n, Ordering::Relaxed);
    }

    /// A connection was accepted; it counts as open until the guard drops.
    pub fn connection_accepted(self: &Arc<Self>) -> OpenConnection {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(Arc::clone(self))
    }
}

/// Counts one connection in `doze_connections_open` while it lives.
pub struct OpenConnection(Arc<NetMetrics>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The page: the core's snapshot and the driver's numbers, in text format.
pub fn render(core: &Snapshot, net: &NetMetrics) -> String {
    let mut out = Text::default();

    out.family(
        "doze_topic_produced_bytes_total",
        "counter",
        "Record batch bytes appended to the topic by Produce requests.",
    );
    for t in &core.topics {
        let labels = [("topic", t.topic.as_str())];
        out.sample(
            "doze_topic_produced_bytes_total",
            &labels,
            t.counters.produced_bytes,
        );
    }
    out.family(
        "doze_topic_produced_records_total",
        "counter",
        "Records appended to the topic by Produce requests.",
    );
    for t in &core.topics {
        let labels = [("topic", t.topic.as_str())];
        out.sample(
            "doze_topic_produced_records_total",
            &labels,
            t.counters.produced_records,
        );
    }
    out.family(
        "doze_topic_fetched_bytes_total",
        "counter",
        "Log bytes of the topic sent in Fetch responses.",
    );
    for t in &core.topics {
        let labels = [("topic", t.topic.as_str())];
        out.sample(
            "doze_topic_fetched_bytes_total",
            &labels,
            t.counters.fetched_bytes,
        );
    }
    out.family(
        "doze_topic_fetched_records_total",
        "counter",
        "Offsets of the topic sent whole in Fetch responses, from each fetch offset \
         (a transaction marker counts as one).",
    );
    for t in &core.topics {
        let labels = [("topic", t.topic.as_str())];
        out.sample(
            "doze_topic_fetched_records_total",
            &labels,
            t.counters.fetched_records,
        );
    }

    out.family(
        "doze_request_duration_seconds",
        "histogram",
        "Time from a request read to its response written, per API (Kafka's request name).",
    );
    for api in net.requests.iter().flatten() {
        if api.histogram.count() > 0 {
            out.histogram(
                "doze_request_duration_seconds",
                ("request", &api.name),
                &api.histogram,
                NANOS_PER_SECOND,
            );
        }
    }

    out.family(
        "doze_fsync_duration_seconds",
        "histogram",
        "Time one group commit took to fdatasync its files and fsync their directories.",
    );
    out.unlabelled_histogram("doze_fsync_duration_seconds", &net.fsync, NANOS_PER_SECOND);
    out.family(
        "doze_group_commit_appends",
        "histogram",
        "Record batches and markers appended to partition logs that one group commit made durable.",
    );
    out.unlabelled_histogram("doze_group_commit_appends", &net.group_commit_appends, 1.0);
    out.family(
        "doze_group_commit_bytes",
        "histogram",
        "Bytes of those appends.",
    );
    out.unlabelled_histogram("doze_group_commit_bytes", &net.group_commit_bytes, 1.0);

    out.family(
        "doze_transactions_open",
        "gauge",
        "Transactions begun and not yet completed (Ongoing, PrepareCommit, PrepareAbort).",
    );
    out.sample("doze_transactions_open", &[], core.txns_open);
    out.family(
        "doze_fetch_sessions",
        "gauge",
        "Fetch sessions open (KIP-227).",
    );
    out.sample("doze_fetch_sessions", &[], core.fetch_sessions);
    out.family(
        "doze_fetches_incremental_total",
        "counter",
        "Fetches served through a fetch session, naming only what changed.",
    );
    out.sample(
        "doze_fetches_incremental_total",
        &[],
        core.counters.fetches_incremental,
    );
    out.family(
        "doze_transactions_committed_total",
        "counter",
        "Transactions committed: markers durable, the outcome stored.",
    );
    out.sample(
        "doze_transactions_committed_total",
        &[],
        core.counters.txns_committed,
    );
    out.family(
        "doze_transactions_aborted_total",
        "counter",
        "Transactions aborted, by the client, a timeout or a new producer of the same id.",
    );
    out.sample(
        "doze_transactions_aborted_total",
        &[],
        core.counters.txns_aborted,
    );
    out.family(
        "doze_transactions_timed_out_total",
        "counter",
        "Transactions the coordinator aborted for outliving their timeout.",
    );
    out.sample(
        "doze_transactions_timed_out_total",
        &[],
        core.counters.txns_timed_out,
    );

    out.family(
        "doze_partition_lso_lag_offsets",
        "gauge",
        "High watermark minus last stable offset: what read_committed consumers \
         wait for while a transaction is open.",
    );
    for p in &core.partitions {
        let partition = p.partition.to_string();
        let labels = [
            ("topic", p.topic.as_str()),
            ("partition", partition.as_str()),
        ];
        out.sample("doze_partition_lso_lag_offsets", &labels, p.lso_lag());
    }
    out.family(
        "doze_consumer_group_lag_offsets",
        "gauge",
        "High watermark minus the group's committed offset, per partition.",
    );
    for c in &core.consumer_offsets {
        let partition = c.partition.to_string();
        let labels = [
            ("group", c.group.as_str()),
            ("topic", c.topic.as_str()),
            ("partition", partition.as_str()),
        ];
        out.sample("doze_consumer_group_lag_offsets", &labels, c.lag());
    }

    out.family(
        "doze_connections_open",
        "gauge",
        "Client connections open (TLS handshakes under way included).",
    );
    let open = net.connections_open.load(Ordering::Relaxed);
    out.sample("doze_connections_open", &[], open);
    out.family(
        "doze_connections_accepted_total",
        "counter",
        "Client connections accepted.",
    );
    let accepted = net.connections_accepted.load(Ordering::Relaxed);
    out.sample("doze_connections_accepted_total", &[], accepted);
    out.family(
        "doze_core_busy_seconds_total",
        "counter",
        "Time spent in the core and carrying out its outputs (one thread at a time does the \
         core's work: its rate is the share of one CPU the core takes).",
    );
    let busy_ns = net.core_busy_ns.load(Ordering::Relaxed);
    out.sample(
        "doze_core_busy_seconds_total",
        &[],
        busy_ns as f64 / NANOS_PER_SECOND,
    );
    out.family(
        "doze_produce_batches_recompressed_total",
        "counter",
        "Produce batches recompressed for their topic's compression.type on connection tasks, \
         beside the core.",
    );
    let recompressed = net.batches_recompressed.load(Ordering::Relaxed);
    out.sample("doze_produce_batches_recompressed_total", &[], recompressed);

    out.0
}

/// The text being written. Writing to a `String` cannot fail, so the
/// `fmt::Result`s are dropped.
#[derive(Default)]
struct Text(String);

impl Text {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        // HELP text escapes backslashes and newlines (none of ours has any).
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.0, " {value}");
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.0.push('{');
        let all = labels.iter().copied().chain(le.map(|le| ("le", le)));
        for (i, (key, value)) in all.enumerate() {
            if i > 0 {
                self.0.push(',');
            }
            self.0.push_str(key);
            self.0.push_str("=\"");
            escape_label_value(&mut self.0, value);
            self.0.push('"');
        }
        self.0.push('}');
    }

    fn unlabelled_histogram(&mut self, name: &str, h: &Histogram, unit: f64) {
        self.histogram_with(name, &[], h, unit);
    }

    fn histogram(&mut self, name: &str, label: (&str, &str), h: &Histogram, unit: f64) {
        self.histogram_with(name, &[label], h, unit);
    }

    /// `_bucket` samples (cumulative, `le` in the rendered unit), `_sum`
    /// and `_count`; `unit` observed units make one rendered unit.
    fn histogram_with(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram, unit: f64) {
        let (counts, sum) = h.read();
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, count) in counts.iter().enumerate() {
            cumulative += count;
            let le = match h.bounds.get(i) {
                Some(&bound) => format_float(bound as f64 / unit),
                None => "+Inf".to_string(),
            };
            self.0.push_str(&bucket);
            self.labels(labels, Some(&le));
            let _ = writeln!(self.0, " {cumulative}");
        }
        self.0.push_str(name);
        self.0.push_str("_sum");
        self.labels(labels, None);
        let _ = writeln!(self.0, " {}", format_float(sum as f64 / unit));
        self.0.push_str(name);
        self.0.push_str("_count");
        self.labels(labels, None);
        let _ = writeln!(self.0, " {cumulative}");
    }
}

/// A float in Rust's shortest form that reads back the same (`0.0025`,
/// `1`, `60`): no exponent for the values here, which every parser takes.
fn format_float(value: f64) -> String {
    format!("{value}")
}

/// Label values escape backslash, double quote and newline (the format's
/// only three). Group ids are the clients' to choose.
fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use doze_core::metrics::{ConsumerOffset, PartitionSnapshot, TopicCounters, TopicSnapshot};
    use kafka_protocol::messages::ApiKey;

    #[test]
    fn buckets_are_inclusive_upper_bounds() {
        let h = Histogram::new(&[1, 10, 100]);
        for v in [0, 1, 2, 10, 11, 100, 101, 5000] {
            h.observe(v);
        }
        let (counts, sum) = h.read();
        assert_eq!(counts, vec![2, 2, 2, 2]);
        assert_eq!(sum, 5225);
    }

    #[test]
    fn a_page_in_text_format() {
        let net = Arc::new(NetMetrics::default());
        net.request_done(ApiKey::Produce as i16, Duration::from_micros(300));
        net.request_done(ApiKey::Produce as i16, Duration::from_millis(70));
        net.request_done(-1, Duration::from_millis(1)); // not served: ignored
        net.request_done(i16::MAX, Duration::from_millis(1));
        net.group_commit(Duration::from_micros(800), 3, 3000);
        let open = net.connection_accepted();
        let core = Snapshot {
            topics: vec![TopicSnapshot {
                topic: "t".into(),
                counters: TopicCounters {
                    produced_bytes: 300,
                    produced_records: 7,
                    fetched_bytes: 200,
                    fetched_records: 5,
                },
            }],
            partitions: vec![PartitionSnapshot {
                topic: "t".into(),
                partition: 0,
                high_watermark: 10,
                last_stable_offset: 4,
            }],
            consumer_offsets: vec![ConsumerOffset {
                group: "g\"1\\\n".into(),
                topic: "t".into(),
                partition: 0,
                committed_offset: 8,
                high_watermark: 10,
            }],
            txns_open: 1,
            ..Snapshot::default()
        };
        let page = render(&core, &net);
        for line in [
            "# TYPE doze_topic_produced_records_total counter",
            "doze_topic_produced_records_total{topic=\"t\"} 7",
            "doze_topic_fetched_bytes_total{topic=\"t\"} 200",
            "doze_request_duration_seconds_bucket{request=\"Produce\",le=\"0.00025\"} 0",
            "doze_request_duration_seconds_bucket{request=\"Produce\",le=\"0.0005\"} 1",
            "doze_request_duration_seconds_bucket{request=\"Produce\",le=\"0.1\"} 2",
            "doze_request_duration_seconds_bucket{request=\"Produce\",le=\"+Inf\"} 2",
            "doze_request_duration_seconds_sum{request=\"Produce\"} 0.0703",
            "doze_request_duration_seconds_count{request=\"Produce\"} 2",
            "doze_fsync_duration_seconds_bucket{le=\"0.001\"} 1",
            "doze_fsync_duration_seconds_count 1",
            "doze_group_commit_appends_bucket{le=\"2\"} 0",
            "doze_group_commit_appends_bucket{le=\"4\"} 1",
            "doze_group_commit_bytes_sum 3000",
            "doze_transactions_open 1",
            "doze_transactions_committed_total 0",
            "doze_partition_lso_lag_offsets{topic=\"t\",partition=\"0\"} 6",
            "doze_consumer_group_lag_offsets{group=\"g\\\"1\\\\\\n\",topic=\"t\",partition=\"0\"} 2",
            "doze_connections_open 1",
            "doze_connections_accepted_total 1",
        ] {
            assert!(
                page.lines().any(|l| l == line),
                "missing {line:?} in\n{page}"
            );
        }
        // Only APIs that were answered have series.
        assert!(!page.contains("request=\"Fetch\""), "{page}");
        drop(open);
        assert!(render(&core, &net)
            .lines()
            .any(|l| l == "doze_connections_open 0"));
    }
}
