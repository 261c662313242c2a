//! The whole boundary of the core: what comes in (`Input`) and what goes out
//! (`Output`). The core never touches a socket, a file or a clock; the driver
//! (the tokio adapter in `net`, or the simulator in `sim`) carries these out
//! and reports completions back as inputs.
//!
//! Its own module, above the modules whose types it carries (`security`'s
//! listener, `produce_checks`, `topic_config`'s produce preparation), so
//! that `crate::io`, the low types it is made of, names none of them: the
//! log and the stores below use those.

use bytes::Bytes;

use crate::io::{BootState, ConnId, DiskOp, FileRange, FramePart, IoError, IoId, MetaOp};

pub enum Input {
    /// The state found on disk. Must be the first input; requests before it
    /// are a driver bug.
    Boot(BootState),
    /// A connection was accepted from `client_host` (Kafka's form: `/` and
    /// the peer's IP), which DescribeGroups reports for its members. Optional:
    /// a connection whose first input is a frame has host "".
    /// `listener`: which one it came in on, and on TLS with a client
    /// certificate, the principal the certificate names.
    Connected {
        conn: ConnId,
        client_host: String,
        listener: crate::security::Listener,
    },
    /// One request frame from a connection, with the 4-byte size prefix removed.
    Frame { conn: ConnId, frame: Bytes },
    /// A Produce request frame, as `Frame`, with its records already read
    /// and checked beside the core (`produce_checks::check_frame` of this
    /// very frame): the core trusts them and does not decompress the
    /// batches again to check them.
    CheckedFrame {
        conn: ConnId,
        frame: Bytes,
        checks: crate::produce_checks::ProduceChecks,
    },
    /// The connection is gone; anything owed to it is dropped.
    Disconnected { conn: ConnId },
    /// A `DiskOp::Sync` finished: on `Ok`, every disk operation emitted before
    /// that sync is durable. On `Err`, some of them may not be.
    SyncDone {
        io: IoId,
        result: Result<(), IoError>,
    },
    /// An `Output::Meta` batch finished: on `Ok` it is durable in meta.db; on
    /// `Err` none of it may be relied on.
    MetaDone {
        io: IoId,
        result: Result<(), IoError>,
    },
    /// A `DiskOp::Read` finished: `Ok` holds exactly the bytes asked for.
    ReadDone {
        io: IoId,
        result: Result<Bytes, IoError>,
    },
    /// A `DiskOp::WriteCleanShutdown` or `DiskOp::RemoveCleanShutdown`
    /// finished: on `Ok` its effect is durable.
    CleanShutdownDone {
        io: IoId,
        result: Result<(), IoError>,
    },
    /// An `Output::Clean` job finished (`log::clean::work::run`'s outcome).
    CleanerDone {
        io: IoId,
        outcome: crate::log::clean::work::CleanerOutcome,
    },
    /// The driver could not copy a `FramePart::File` of a response to
    /// `conn` (EIO, a file gone): it closed the connection without sending
    /// the response. The partition answers KAFKA_STORAGE_ERROR from then on,
    /// until a restart, as Kafka takes a failed log dir offline.
    ResponseReadFailed {
        conn: ConnId,
        range: FileRange,
        error: IoError,
    },
    /// The driver is stopping cleanly (SIGTERM): the core makes what it
    /// holds durable and checkpoints every partition, so the next start reads
    /// only indexes, then answers `Output::Stopped`. The driver sends no more
    /// frames after this one.
    Shutdown,
    /// Time passed; the driver sends this when `poll_timeout` is reached.
    Tick,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A response frame (without the size prefix), in request order per connection.
    Response {
        conn: ConnId,
        frame: Bytes,
    },
    /// A response frame made of parts (a Fetch response whose record sets
    /// are segment file ranges), in request order with the `Response`s. Its
    /// size prefix is the sum of the parts' lengths. A part the driver cannot
    /// read: close the connection, send nothing of the frame, and report
    /// `Input::ResponseReadFailed`.
    ///
    /// Ordering with the disk ops: **a response's file parts see every
    /// `Output::Disk` op emitted before this output and none emitted after
    /// it**, however late the driver copies them. The cleaner renames a new
    /// `{base}.log` over the live one while consumers are served, and
    /// retention deletes segments: a response planned before the swap or the
    /// deletion reads the old file (the driver pins a descriptor at this
    /// point, which keeps the old inode alive), one planned after reads the
    /// new file. The contract is about which file a name holds: the bytes a
    /// part reads are synced ones (below the high watermark), which the
    /// core never cuts and whose appends ran before their sync completed,
    /// so the driver does not order the reads against appends and cuts
    /// (net serves a response whose files it has open, with no rename or
    /// deletion queued, at once). A response must not point at bytes not
    /// yet synced.
    ResponseParts {
        conn: ConnId,
        parts: Vec<FramePart>,
    },
    /// A request of `conn` is done and gets no response (an acks=0
    /// Produce), in its turn among the `Response`s: every request before it
    /// has been answered. With the responses it tells a driver how many of
    /// the requests it handed in are still unanswered, the count it pauses
    /// reading at (`limits::CONN_REQUESTS_IN_FLIGHT_MAX`); a driver that
    /// does not count ignores it.
    NoResponse {
        conn: ConnId,
    },
    /// Close this connection (bad input Kafka answers by closing).
    Close {
        conn: ConnId,
    },
    Disk(DiskOp),
    /// The log cleaner's CPU work on one segment: run
    /// `log::clean::work::run(work, ..)` over the segment's live `.log` and
    /// its `.log.cleaned` copy (created when absent, as by
    /// `DiskOp::AppendCleaned`), off the thread that drives the core.
    /// Ordered with the `Disk` ops as if it were one: the driver opens both
    /// files in order with the ops emitted before it, so the job reads what
    /// they left; the ops behind it need not wait for the job. Completion:
    /// `Input::CleanerDone`. What it appends is made durable by a `Sync` the
    /// core emits after that completion (one emitted before may not cover
    /// it); until then a power cut may lose it, as `AppendCleaned`'s bytes.
    /// (Not a `DiskOp`: the job is the cleaner's, above the log, and the
    /// disk ops sit below it.)
    Clean {
        io: IoId,
        work: crate::log::clean::work::CleanerWork,
    },
    /// Write a batch to meta.db atomically and durably; completion `Input::MetaDone`.
    Meta {
        io: IoId,
        ops: Vec<MetaOp>,
    },
    /// After `Input::Shutdown`: everything is durable and checkpointed, and
    /// the clean-shutdown file was written (or its write failed); the
    /// driver may exit. It writes nothing after this.
    Stopped,
    /// The codec `topic`'s batches are stored with (its compression.type)
    /// and the largest batch it takes, given for every topic whose setting
    /// is not `producer` and again whenever either changes (`Producer` once
    /// the topic is gone or set back). Only an offer of work: a driver may
    /// recompress the batches of a Produce request for such a topic on its
    /// connection task
    /// (`recompress::prepare_frame`) before handing the frame in, so the
    /// compressing runs beside the core; the core stores correctly whatever
    /// it is handed (a driver may ignore this output).
    TopicCompression {
        topic: String,
        prep: crate::topic_config::ProducePrep,
    },
    /// `conn`, on a SASL listener, has authenticated: from its next frame on
    /// it is read as any logged-in connection's, no longer limited to
    /// `sasl.server.max.receive.size` nor charged to the unauthenticated
    /// connections' budget (the driver's business; a driver without such
    /// limits ignores this).
    Authenticated {
        conn: ConnId,
    },
}
