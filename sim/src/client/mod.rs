//! Simulated Kafka clients. Each is a small state machine the world drives:
//! it is woken (`on_wake`), handed decoded responses (`on_response`) and told
//! when its connection drops (`on_disconnect`); it acts through `Cx`: send a
//! request, ask to connect, ask to be woken later, write to the history.
//!
//! Clients follow the rules of the real ones they stand for (see each file).
//!
//! - `producer`: idempotent and plain producers;
//! - `txn_producer`: transactional producers (commit, abort, time out on
//!   purpose, die with a transaction open, or live on as a fenced zombie);
//! - `consumer`: read_uncommitted and read_committed readers, and the
//!   verifier that reads the final log back;
//! - `copier`: a read-process-write job (read_committed input, output and
//!   input offsets in one transaction) that crashes and resumes;
//! - `group_copier`: the same job as members of one consumer group, which
//!   rebalance in the middle of transactions;
//! - `truncator`: an operator trimming the main topic with DeleteRecords;
//! - `churner`: an operator deleting a scratch topic and creating it again;
//! - `offset_keeper`: a simple group's offsets committed with retention
//!   times, read back while the broker expires them.

pub mod admin;
pub mod batches;
mod churn_requests;
mod churn_txn;
pub mod churner;
pub mod consumer;
pub mod copier;
pub mod group_copier;
mod group_copy;
mod group_member;
pub mod group_requests;
pub mod offset_keeper;
pub mod producer;
mod reset;
pub mod truncator;
pub mod txn_producer;
pub mod txn_requests;
pub mod values;
pub mod wire;

use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::ResponseKind;
use rand::rngs::ChaCha8Rng;

use crate::history::History;
use wire::Wire;

/// What a client may do while it is being driven.
pub struct Cx<'a> {
    /// Simulated time (ms since the UNIX epoch).
    pub now_ms: i64,
    /// ms since the run began, for messages.
    pub elapsed_ms: i64,
    pub rng: &'a mut ChaCha8Rng,
    pub wire: &'a mut Wire,
    pub history: &'a mut History,
    pub(crate) notes: Vec<String>,
    pub(crate) wake_at_ms: Option<i64>,
    pub(crate) want_connect: bool,
    pub(crate) want_disconnect: bool,
}

impl<'a> Cx<'a> {
    pub fn new(
        now_ms: i64,
        elapsed_ms: i64,
        rng: &'a mut ChaCha8Rng,
        wire: &'a mut Wire,
        history: &'a mut History,
    ) -> Self {
        Self {
            now_ms,
            elapsed_ms,
            rng,
            wire,
            history,
            notes: Vec::new(),
            wake_at_ms: None,
            want_connect: false,
            want_disconnect: false,
        }
    }

    /// Be woken `delay_ms` from now (the earliest of several asks wins).
    pub fn wake_in(&mut self, delay_ms: i64) {
        assert!(delay_ms >= 0, "a wake-up in the past");
        let at_ms = self.now_ms + delay_ms;
        self.wake_at_ms = Some(self.wake_at_ms.map_or(at_ms, |t| t.min(at_ms)));
    }

    /// Open a connection; `on_connected` or `on_disconnect` follows.
    pub fn connect(&mut self) {
        self.want_connect = true;
    }

    /// Close the connection now, as a process that dies does: requests on
    /// it go unanswered and no `on_disconnect` follows.
    pub fn disconnect(&mut self) {
        self.want_disconnect = true;
        self.want_connect = false;
    }

    /// A line for the trace, about what the client concluded.
    pub fn note(&mut self, line: String) {
        self.notes.push(line);
    }

    pub fn violation(&mut self, what: String) {
        self.notes.push(format!("VIOLATION {what}"));
        self.history.violation(self.elapsed_ms, what);
    }
}

pub trait Client {
    fn name(&self) -> String;
    /// A timer ran out, or the world asks the client to make progress.
    fn on_wake(&mut self, cx: &mut Cx);
    fn on_connected(&mut self, cx: &mut Cx) {
        self.on_wake(cx)
    }
    fn on_response(&mut self, cx: &mut Cx, correlation_id: i32, response: ResponseKind);
    /// The connection dropped; every request on it is lost.
    fn on_disconnect(&mut self, cx: &mut Cx);
    /// The workload is over: stop starting new work (consumers stop).
    fn finish(&mut self) {}
    /// Nothing left to do (producers: everything acknowledged).
    fn is_done(&self) -> bool;
    /// One line on where the client stands, for a stuck run's report.
    fn status(&self) -> String;
}

/// Kafka errors a client retries (Errors.java: RetriableException subclasses).
pub fn is_retriable(code: i16) -> bool {
    matches!(
        code,
        2 /* CORRUPT_MESSAGE */ | 3 /* UNKNOWN_TOPIC_OR_PARTITION */ | 5 /* LEADER_NOT_AVAILABLE */
        | 6 /* NOT_LEADER_OR_FOLLOWER */ | 7 /* REQUEST_TIMED_OUT */ | 13 /* NETWORK_EXCEPTION */
        | 14 /* COORDINATOR_LOAD_IN_PROGRESS */ | 15 /* COORDINATOR_NOT_AVAILABLE */ | 16 /* NOT_COORDINATOR */
        | 19 /* NOT_ENOUGH_REPLICAS */ | 20 /* NOT_ENOUGH_REPLICAS_AFTER_APPEND */ | 56 /* KAFKA_STORAGE_ERROR */
    )
}

/// Backoff before a retry: Kafka's retry.backoff.ms (100) with jitter,
/// doubling per attempt up to retry.backoff.max.ms (1000).
pub fn backoff_ms(rng: &mut ChaCha8Rng, attempt: u32) -> i64 {
    use rand::RngExt;
    let base_ms = (100i64 << attempt.min(4)).min(1000);
    base_ms * rng.random_range(80..=120) / 100
}

/// Fetch entries for partitions 0.. from `positions`, 64 KiB each.
pub fn fetch_partitions(positions: &[i64]) -> Vec<FetchPartition> {
    positions
        .iter()
        .enumerate()
        .map(|(p, &offset)| {
            FetchPartition::default()
                .with_partition(p as i32)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(64 * 1024)
        })
        .collect()
}
