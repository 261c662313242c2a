//! Every limit of the broker, in one place. Units last in names.

/// Largest request frame accepted from a client; a larger size prefix closes
/// the connection before anything is read. Kafka's socket.request.max.bytes
/// is 100 MiB; ours is lower because the decoders allocate per element
/// claimed, and a frame bounds what a hostile one can make them touch
/// (see net/src/alloc.rs). Clients send at most max.request.size (1 MiB by
/// default) per request.
pub const REQUEST_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Largest record batch accepted in a produce (Kafka's message.max.bytes default
/// is 1 MiB + overhead; we allow the same order).
pub const MESSAGE_BYTES_MAX: usize = 1024 * 1024 + 12;
/// Largest records field of one partition in a produce request.
pub const RECORD_LIST_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Most bytes a batch's records section may decompress to. Kafka sets no
/// such bound, but it streams records one by one; doze decompresses a
/// batch whole, on the core task, and a 1 MiB zstd batch of zeros would
/// otherwise grow to 32 GiB (`log::clean::codec`). Clients fill a batch up
/// to about 1 MB before compressing (librdkafka, franz-go, kafka-python:
/// batch.size and its kin count uncompressed bytes; the Java client's
/// estimate stays near its batch.size, 16 KiB by default), so 64 MiB is far
/// above anything a client writes and bounds what one batch costs: 64 MiB of
/// memory and tens of milliseconds of the core. Produce answers a batch
/// past it MESSAGE_TOO_LARGE, on which the Java producer splits the batch
/// and sends the halves.
pub const BATCH_RECORDS_DECOMPRESSED_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Most records one produced batch may hold (its header's count); more is
/// MESSAGE_TOO_LARGE, on which the Java producer splits the batch. Kafka
/// sets no such bound: max.message.bytes bounds a batch's compressed size
/// and LogValidator streams its records one by one, so a batch of a few
/// KiB may still claim millions of tiny records (6.7 M identical 7-byte
/// records gzip to 68 KB), each of which costs the core time to read,
/// check and, when the batch is rebuilt, write. Clients stay far below it:
/// librdkafka's batch.num.messages is at most 1,000,000 (10,000 by
/// default), and the Java producer's batch.size (16 KiB by default)
/// counts bytes, so its batches hold thousands. This bounds a batch at
/// tens of milliseconds of record work.
pub const BATCH_RECORDS_MAX: usize = 1_000_000;
/// Requests of one connection handed to the core and not yet answered, at
/// most. The driver stops reading the connection's socket at this many and
/// reads on once one is answered (a response written, or the core's
/// `Output::NoResponse`): the client waits in TCP, as Kafka's SocketServer
/// applies backpressure by muting a channel while its request is handled,
/// and never closes for it. Clients pipeline far more (librdkafka's
/// max.in.flight defaults to 1,000,000 per connection, and with 10,000
/// partitions it sends more than a thousand requests at once), so closing
/// here dropped their connections. It bounds what one connection makes the
/// broker hold: the core's reorder buffer (`conn.rs`) and the responses
/// queued for its writer. Unlike Kafka, which handles one request of a
/// connection at a time, 1,024 keep a pipelining client's requests
/// flowing. The core closes a connection that sends one more while this
/// many wait, a safety net for a driver that does not pause (net's never
/// meets it; the simulator's clients keep a handful in flight).
pub const CONN_REQUESTS_IN_FLIGHT_MAX: usize = 1024;
/// How long a connection on a SASL listener may take to authenticate
/// before it is closed: an idle or slow client cannot hold a slot.
pub const SASL_AUTHENTICATION_TIMEOUT_MS: i64 = 10_000;
/// Connections on SASL listeners not yet authenticated, at most; more are
/// closed as they come (authenticated ones are bounded by the driver's
/// Connections the kernel holds for a listener before the broker accepts
/// them (listen(2)'s backlog; net's `main.rs` says why it is not std's 128).
pub const LISTEN_BACKLOG: i32 = 4096;
/// connection limit).
pub const UNAUTHENTICATED_CONNECTIONS_MAX: usize = 1024;
/// Bytes of one SASL token (a SCRAM message is a few hundred).
pub const SASL_TOKEN_BYTES_MAX: usize = 64 * 1024;
/// Partitions a topic may have.
pub const TOPIC_PARTITIONS_MAX: i32 = 10_000;
/// Topics the broker holds.
pub const TOPICS_MAX: usize = 10_000;
/// Partitions one DescribeTopicPartitions answer lists at most, whatever
/// the client asks (Kafka's max.request.partition.size.limit default).
pub const DESCRIBE_TOPIC_PARTITIONS_MAX: i32 = 2000;
/// Longest topic name (Kafka: 249).
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Longest time a fetch may wait (a larger max_wait_ms is clamped).
pub const FETCH_WAIT_MS_MAX: i64 = 60_000;
/// Fetch responses never carry more than this many bytes, whatever the client
/// asks: Kafka's broker `fetch.max.bytes` default, 55 MiB
/// (`ServerConfigs.FETCH_MAX_BYTES_DEFAULT`). A client asking for more (the
/// bench's confluent-kafka consumer asks 64 MiB) gets what Kafka would send.
pub const FETCH_RESPONSE_BYTES_MAX: usize = 55 * 1024 * 1024;
/// Segments one partition's records in a fetch answer may span (a fetch
/// goes on past a segment's end while it has room: `next_fetch_range`).
pub const FETCH_SEGMENTS_MAX: usize = 64;
/// Fetch sessions (KIP-227) the broker keeps: Kafka's
/// max.incremental.fetch.session.cache.slots default.
pub const FETCH_SESSIONS_MAX: usize = 1000;
/// How long a fetch session is kept from eviction by a newer one: unused
/// this long it is stale, and younger than this it cannot be evicted for a
/// larger one (Kafka's min.incremental.fetch.session.eviction.ms default).
pub const FETCH_SESSION_EVICTION_MS: i64 = 120_000;
/// What one partition cached in a fetch session is counted to cost, besides
/// its topic's name: its request fields, answer fields and two map entries.
pub const FETCH_SESSION_PARTITION_BYTES: usize = 160;
/// Bytes the partitions of all fetch sessions may cost together, counted as
/// they are added (Kafka bounds only the number of sessions, and a session
/// may name partitions that do not exist). 32 MiB is about 200,000
/// partitions: twenty consumers each fetching 10,000.
pub const FETCH_SESSIONS_CACHED_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Consumer groups the coordinator holds (a new one is refused with
/// COORDINATOR_NOT_AVAILABLE beyond this).
pub const GROUPS_MAX: usize = 10_000;
/// Members (and, separately, members waiting to join with a new id) per group:
/// Kafka's group.max.size, which defaults to unbounded there.
pub const GROUP_MEMBERS_MAX: usize = 1_000;
/// How long a new member's JoinGroup may wait in a rebalance before the
/// member is dropped (Kafka's classicGroupNewMemberJoinTimeoutMs, 5 minutes).
pub const GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 5 * 60 * 1000;
/// Group timers firing in one tick; more means a timer reschedules itself
/// in a loop (a bug).
pub const GROUP_TIMERS_PER_TICK_MAX: usize = 1_000_000;
/// Longest metadata string of a committed offset (Kafka's
/// offset.metadata.max.bytes); longer gets OFFSET_METADATA_TOO_LARGE.
pub const OFFSET_METADATA_BYTES_MAX: usize = 4096;
/// Batches remembered per producer and partition for duplicate detection
/// (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN).
pub const PRODUCER_BATCHES_RETAINED: usize = 5;
/// Producer ids are taken from meta.db in blocks of this many, so only one
/// InitProducerId in this many waits for a meta.db write.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
/// How long the coordinator waits before trying again to carry out a
/// decision whose marker or Complete record could not be stored.
pub const TXN_RETRY_BACKOFF_MS: i64 = 100;
/// How long a carried-out decision's Complete record may wait to be
/// superseded by the id's next stored record (its producer's next
/// AddPartitionsToTxn, usually within milliseconds) before it is written on
/// its own. The longer, the more meta.db writes are saved; what it costs is a
/// crash in the window carrying the decision out again at start-up (markers
/// written twice, which readers ignore).
pub const TXN_COMPLETE_OWED_MS: i64 = 200;
/// Batch positions a partition log remembers (the most recent ones), so that
/// a consumer at the tail is served without reading batch headers from disk.
pub const KNOWN_BATCHES_MAX: usize = 256;
/// Bytes of one read of batch headers when a fetch or a timestamp search
/// looks for a batch (a little more than the index interval, 4 KiB).
pub const LOCATE_READ_BYTES: usize = 16 * 1024;
/// Header reads one search makes before it gives up on a segment whose bytes
/// disagree with its index (a bound on a loop, not a tuning knob).
pub const LOCATE_STEPS_MAX: usize = 4096;
/// Bytes of one read of the start-up scan (bounds the memory it holds).
pub const RECOVERY_READ_BYTES: usize = 8 * 1024 * 1024;
/// Reads the start-up scan keeps in flight at once, over all partitions.
pub const RECOVERY_READS_IN_FLIGHT_MAX: usize = 4;
/// Log bytes made durable since a partition's last recovery checkpoint after
/// which a new one is written: bounds what a start after a crash must read.
pub const CHECKPOINT_BYTES: u64 = 32 * 1024 * 1024;
/// At most this long between a partition's change and its next checkpoint.
pub const CHECKPOINT_INTERVAL_MS: i64 = 30_000;

/// Bytes of appends queued to the driver's disk writer and not yet
/// written. Above it the connection readers start no new request, so a
/// producer faster than the disk waits in its own socket instead of in the
/// broker's memory. The requests themselves are bounded apart
/// (`QUEUED_REQUEST_BYTES_MAX`).
pub const APPENDS_QUEUED_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Bytes of request frames being read or waiting for the core, at most
/// (Kafka's `queued.max.request.bytes`, the memory pool its network
/// threads allocate receive buffers from; Kafka's default is unbounded,
/// doze's is this). A frame's bytes are charged when their buffer is
/// allocated, before they are read, so a frame declared and never sent
/// costs what was allocated for it, and a connection that would pass the
/// budget waits unread (Kafka mutes it). Settable.
pub const QUEUED_REQUEST_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Frames at least this large (clients send at most max.request.size,
/// 1 MiB by default, per request) are charged to a share of the request
/// budget of their own as well, so that connections that declare large
/// frames and send them slowly, or never, leave the rest of the budget to
/// requests of a usual size. A frame is charged its whole declared size
/// at once, as Kafka's memory pool does: a charge that grew as bytes
/// arrived could leave every frame holding part of the budget and
/// waiting for more.
pub const LARGE_REQUEST_BYTES_MIN: usize = 2 * 1024 * 1024;
/// The large frames' share of `QUEUED_REQUEST_BYTES_MAX`.
pub const LARGE_REQUESTS_QUEUED_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Frames this small (Metadata, heartbeats, commits, acks=all produces of
/// a few records) may be read from a reserve of their own when the
/// request budget is spent, so that connections holding large partial
/// frames cannot keep every other client's small requests waiting.
pub const SMALL_REQUEST_BYTES_MAX: usize = 64 * 1024;
/// The small requests' reserve.
pub const SMALL_REQUESTS_QUEUED_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Largest frame a connection on a SASL listener may send before it has
/// authenticated: Kafka's `sasl.server.max.receive.size` default (a larger
/// size closes the connection, as Kafka's InvalidReceiveException does).
/// Settable.
pub const SASL_SERVER_MAX_RECEIVE_BYTES: usize = 512 * 1024;
/// Bytes of frames from unauthenticated connections being read or waiting,
/// all together: they are charged to this budget alone, so clients that
/// never log in cannot take the request budget of those that did.
pub const UNAUTHENTICATED_QUEUED_BYTES_MAX: usize = 4 * 1024 * 1024;

/// A response frame with more file bytes than this is read and written in
/// chunks of this size (net's `filereader.rs`), not read whole first.
pub const RESPONSE_CHUNK_BYTES: usize = 1024 * 1024;
/// A response frame with at least this many file bytes goes from the page
/// cache to a plain TCP socket by sendfile(2) (net's `filereader.rs`),
/// never copied through the broker's memory; a smaller one is read into one
/// buffer and written with the responses around it.
pub const RESPONSE_SPLICE_BYTES_MIN: u64 = 64 * 1024;

/// A response frame of at most this many bytes may be written to a plain
/// TCP socket by the thread that produced it, when the connection's writer
/// is idle (net's `direct_write.rs`): it is written under the core's lock,
/// so only a small one, which the socket's buffer takes in one system call.
pub const RESPONSE_DIRECT_WRITE_BYTES_MAX: usize = 64 * 1024;
/// Responses written directly (as above) per completion a storage worker
/// hands the core on its own thread: one, the answer a lone waiting client
/// waits for. Under load a completion answers many; their writers send
/// them on the runtime's threads in parallel, while the worker goes back
/// to its disk or meta.db work instead of making one system call each.
pub const RESPONSE_DIRECT_WRITES_PER_COMPLETION_MAX: usize = 1;

/// Produce requests recompressed at once on the driver's blocking pool
/// (`Output::TopicCompression`), at most; fewer on a machine with fewer
/// cores than this and one (net leaves a core to the core task). Kafka's
/// num.io.threads is 8.
pub const RECOMPRESS_TASKS_MAX: usize = 8;
/// Chunks of one response read ahead of the socket: the disk reads overlap
/// the writes, and a response holds at most this many chunks in memory.
pub const RESPONSE_CHUNKS_AHEAD: usize = 4;
/// Chunk buffers kept for reuse once written, for all connections together.
pub const RESPONSE_CHUNKS_POOLED: usize = 32;
/// Threads the driver's disk worker writes a run of appends with (itself
/// included), each taking whole files: two cores copy into the page cache
/// at once.
pub const DISK_APPEND_LANES: usize = 2;
/// A run of appends smaller than this is written by the worker alone:
/// handing a share to another thread costs more than the copy it saves.
pub const DISK_APPEND_PARALLEL_BYTES_MIN: usize = 256 * 1024;
/// A sync round with at most this many log bytes, reached while the
/// syncer thread is idle and nothing else is queued, is fsynced by the disk
/// worker itself: handing it over costs a thread wake-up on the commit path
/// (a marker, a small produce), and there is nothing to write meanwhile.
pub const DISK_INLINE_SYNC_BYTES_MAX: u64 = 64 * 1024;
/// Appends the disk worker gathers from its queue into one run.
pub const DISK_APPENDS_GATHERED_MAX: usize = 1024;
/// The driver's meta.db journal (net's `metajournal.rs`) holds at most this
/// many bytes of records before a checkpoint (a durable sled flush) empties
/// it: about 50,000 transaction state changes, and a start-up replays at
/// most this much.
pub const META_JOURNAL_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// sled's page cache for meta.db (its `cache_capacity`; sled's default is
/// 1 GiB). Why: every transactional id, group and partition has a key
/// there, and memory is bounded whatever the clients make. The core keeps
/// its state in memory and reads meta.db at start-up only, so a small
/// cache costs no request anything.
pub const META_DB_CACHE_BYTES: u64 = 16 * 1024 * 1024;
/// Writes a meta.db checkpoint hands sled in one batch (net's
/// `metastore.rs` says why it is not all of them at once).
pub const META_DB_APPLY_OPS_MAX: usize = 1000;
/// The journal file is written with zeros this much at a time ahead of its
/// records (so that appending never changes its size), up to the maximum.
pub const META_JOURNAL_GROWTH_BYTES: u64 = 1024 * 1024;

/// Bytes the log cleaner reads from a segment at a time (a batch larger
/// than this is read whole), and the kept bytes it gathers before writing
/// them to the cleaned copy: Kafka's log.cleaner.io.buffer.size (512 KiB
/// there, split between a read and a write buffer, and grown to fit a
/// large batch). The work runs beside the core (`log::clean::work`), so a
/// segment is never held whole, however large.
pub const CLEANER_IO_BUFFER_BYTES: usize = 1024 * 1024;
/// Keys one cleaning pass maps at most (16-byte hashes and an offset each:
/// about 64 MiB at this bound with the hash map's overhead, as Kafka's
/// log.cleaner.dedupe.buffer.size of 128 MiB bounds its map). A pass whose
/// dirty range holds more keys cleans what it mapped and leaves the rest dirty.
pub const CLEANER_MAP_ENTRIES_MAX: usize = 1_000_000;

/// SO_SNDBUF asked for every client connection's socket (Linux doubles it
/// for its own bookkeeping and then stops autotuning it). A large fetch
/// response leaves through sendfile(2) from a blocking-pool thread that
/// sleeps whenever the socket is full: autotuned up to 4 MiB, each call
/// pushed ~3.3 MB at 1.9 ms (0.63 s of sendfile for 1.1 GB read twice by
/// doze-bench), against 301 us for ~0.8 MB (0.42 s) at this size. Smaller
/// buffers drain faster than the thread wakes (~0.1-0.25 ms here): Kafka's
/// socket.send.buffer.bytes default, 100 KiB, read 474-553 MB/s against
/// 1,016 for the OS default, in one A/B. Three A/B runs of warm reads in
/// turns (8 partitions, 512 MiB, doze-bench, medians of 6, read_uncommitted
/// / read_committed, MB/s), OS default vs this: 1,120/1,156 vs 1,654/1,190
/// (at 200 KiB), 1,040/1,044 vs 1,329/1,252, 929/1,007 vs 1,530/1,103,
/// 1,018/1,034 vs 1,410/1,340. 800 KiB in flight is 800 MB/s at a 1 ms
/// round trip, four times what Kafka's default allows.
pub const SOCKET_SEND_BUFFER_BYTES: usize = 400 * 1024;

/// The driver's operator console (net's `console/`): HTTP connections open
/// at once (one more is closed as it comes; a scraper needs one).
pub const CONSOLE_CONNECTIONS_MAX: usize = 64;
/// How long a console client has to send its request header.
pub const CONSOLE_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// How long one console connection may last, request and response, before
/// it is closed (a client that stops reading holds nothing for long).
pub const CONSOLE_CONNECTION_MS_MAX: u64 = 30_000;
/// How long a console page waits for the broker task's snapshot before it
/// answers 503 (the broker is stopping, or far behind).
pub const CONSOLE_SNAPSHOT_WAIT_MS: u64 = 5_000;
/// How long a console page may take to ask the broker everything it
/// shows (over Kafka's protocol) before it answers 504 instead.
pub const CONSOLE_PAGE_MS_MAX: u64 = 15_000;
/// Bound on one of those requests (the client's request timeout).
pub const CONSOLE_REQUEST_MS_MAX: u64 = 5_000;
/// Bytes of a partition's log one page of the console fetches (read
/// uncommitted and read committed, once each); a larger first batch is
/// fetched whole, as Kafka's Fetch returns it.
pub const CONSOLE_PAGE_LOG_BYTES: i32 = 64 * 1024;
/// Console partition pages whose records are read at once (on the blocking
/// pool); more wait their turn, so viewers cost at most this many threads'
/// CPU and this many pages' memory.
pub const CONSOLE_PAGE_READS_MAX: usize = 2;
/// The largest Fetch answer the console accepts (a batch may be as large
/// as a topic's max.message.bytes allows).
pub const CONSOLE_RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Records one partition page shows at most; the next page goes on from
/// the first one left out.
pub const CONSOLE_PAGE_RECORDS_MAX: usize = 500;
/// Characters of a record's key or value shown (the rest is cut, marked).
pub const CONSOLE_VALUE_CHARS_SHOWN: usize = 120;
/// Partitions the cluster page lists (with their offsets, producers and
/// size on disk); more are counted, not listed.
pub const CONSOLE_PARTITIONS_SHOWN_MAX: usize = 1_000;
/// Transactional ids the cluster page describes (state, partitions, age);
/// more are counted, not listed.
pub const CONSOLE_TRANSACTIONS_SHOWN_MAX: usize = 200;
/// Consumer groups the cluster page describes (members, offsets, lag).
pub const CONSOLE_GROUPS_SHOWN_MAX: usize = 100;
/// Most bytes the batches of one Produce request may decompress to, all
/// together (each batch also at most
/// `BATCH_RECORDS_DECOMPRESSED_BYTES_MAX`). A batch that would pass it is
/// MESSAGE_TOO_LARGE, as one past the per-batch bound. Kafka sets none; a
/// 32 MiB request of small high-ratio batches on many partitions would
/// otherwise cost tens of GiB of decompressing. Clients send at most
/// max.request.size (1 MiB by default) of compressed batches per request.
pub const PRODUCE_DECOMPRESSED_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Most decompressed bytes the core reads again in one Produce request to
/// list the records a topic's rules refuse (Kafka's record_errors): the
/// records were read and counted off the core (`doze_core::produce_checks`),
/// but which record broke a timestamp bound is known only by reading them.
/// Past it a refused batch is answered with its error and no list, so a
/// client cannot make the core decompress more than this per request.
pub const PRODUCE_RECORD_ERRORS_READ_BYTES_MAX: usize = 1024 * 1024;
/// Most decompressed bytes of batches the core rebuilds in one Produce
/// request for their topic's compression.type (Kafka's LogValidator
/// rebuilds a batch of another codec, or a compressed one whose inner
/// offsets are wrong). The driver rebuilds them beside the core
/// (`doze_core::recompress::prepare_frame`); the core meets one only when
/// the compression.type changed while the request was on its way, or a
/// frame came unprepared. Past it a batch is answered NOT_ENOUGH_REPLICAS,
/// which clients retry, and the retry comes prepared (`api::produce`'s
/// `stored_form` says why). 1 MiB is tens of milliseconds of gzip at its
/// default level; Kafka sets no such bound.
pub const PRODUCE_CORE_REBUILD_BYTES_MAX: usize = 1024 * 1024;
/// The largest zstd window (log2 bytes) a decoder accepts: zstd's own
/// default limit, 2^27 (128 MiB), which Kafka's decoder (zstd-jni) keeps, so
/// that a producer at compression.zstd.level 20-22 (windows of 2^25-2^27
/// when it streams without a known size) is read as Kafka reads it. A frame
/// declaring more is refused as a stream the codec cannot read. The window
/// is address space: the decoder writes into it only as far as its output
/// goes, and that output is bounded (`BATCH_RECORDS_DECOMPRESSED_BYTES_MAX`),
/// so a frame that declares a large window and holds little costs little.
/// doze's own zstd writer stays within it too.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 27;
