//! Every limit of the broker, in one place. Units last in names.

/// Largest request frame accepted from a client; a larger size prefix closes
/// the connection before anything is read (Kafka's socket.request.max.bytes).
pub const REQUEST_BYTES_MAX: usize = 100 * 1024 * 1024;
/// Largest record batch accepted in a produce (Kafka's message.max.bytes default
/// is 1 MiB + overhead; we allow the same order).
pub const MESSAGE_BYTES_MAX: usize = 1024 * 1024 + 12;
/// Largest records field of one partition in a produce request.
pub const RECORD_LIST_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Requests a connection may have outstanding before the core stops reading
/// more from it is the driver's business; this bounds the reorder buffer.
pub const CONN_REQUESTS_IN_FLIGHT_MAX: usize = 1024;
/// Partitions a topic may have.
pub const TOPIC_PARTITIONS_MAX: i32 = 10_000;
/// Topics the broker holds.
pub const TOPICS_MAX: usize = 10_000;
/// Longest topic name (Kafka: 249).
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Longest time a fetch may wait (a larger max_wait_ms is clamped).
pub const FETCH_WAIT_MS_MAX: i64 = 60_000;
/// Fetch responses never carry more than this many bytes, whatever the client asks.
pub const FETCH_RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Bytes appended but not yet synced before produce requests wait for the
/// sync in flight (back-pressure on the group commit).
pub const UNSYNCED_BYTES_MAX: usize = 256 * 1024 * 1024;
