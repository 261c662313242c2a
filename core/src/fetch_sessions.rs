//! Fetch sessions (KIP-227): a consumer fetching many partitions names them
//! once, in a full fetch that opens a session; its later fetches name only
//! the partitions whose request changed (and those to forget), and their
//! answers leave out partitions with nothing new.
//!
//! The rules are Kafka's, read from apache/kafka
//! `server/src/main/java/org/apache/kafka/server/`:
//! - `FetchManager.newContext`: epoch 0 or -1 is a full fetch, and closes the
//!   session it names; epoch -1 never opens one (sessionless), epoch 0 tries
//!   to. Any other epoch is incremental: an unknown session is
//!   FETCH_SESSION_ID_NOT_FOUND, another epoch INVALID_FETCH_SESSION_EPOCH;
//!   otherwise the request's partitions are added or updated, the forgotten
//!   ones removed, and a session left empty is closed (the fetch then runs
//!   sessionless). The session's epoch moves on when the request comes in.
//! - `FetchContext.FullFetchContext`: the session is made when the answer is
//!   built, with every partition of the request, in its order.
//! - `FetchContext.IncrementalFetchContext`: the fetch reads every partition
//!   of the session, in the session's order; the answer keeps a partition
//!   only if it has records, a new high watermark or log start offset, or an
//!   error (`FetchSession.CachedPartition.maybeUpdateResponseData`). A
//!   partition that sent records moves to the end of the order, so the
//!   response size is shared round-robin. If the epoch moved while the fetch
//!   waited (a duplicate request), the answer is INVALID_FETCH_SESSION_EPOCH.
//! - `FetchSessionCacheShard`: at most `FETCH_SESSIONS_MAX` sessions; when
//!   full, a new one evicts the least recently used if it is stale (unused for
//!   `FETCH_SESSION_EVICTION_MS`), else the smallest session older than that
//!   if the new one holds more partitions; failing both, the fetch is served
//!   without a session (id 0), which every client accepts.
//!
//! Doze serves Fetch up to v12, so sessions name topics (v13's topic ids are
//! not served). Ids are positive, unique, and unguessable: SHA-256 over the
//! driver's entropy and a counter (the core has no randomness of its own),
//! since a guessed id would let one client disturb another's session.
//!
//! Kafka bounds only the number of sessions. Doze also counts the bytes the
//! cached partitions cost as they are added (`FETCH_SESSIONS_CACHED_BYTES_MAX`):
//! a full fetch past it gets no session; an incremental one that would pass
//! it closes its session and answers FETCH_SESSION_ID_NOT_FOUND, on which
//! clients start over with a full fetch.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use sha2::{Digest, Sha256};

use crate::limits;

/// A full fetch that opens no session and closes none (`FINAL_EPOCH`).
const FINAL_EPOCH: i32 = -1;
/// A full fetch that asks for a session (`INITIAL_EPOCH`).
const INITIAL_EPOCH: i32 = 0;

/// What a fetch does with sessions, decided when it comes in and carried
/// while it waits, to shape its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionUse {
    /// Answered whole, session id 0.
    Sessionless,
    /// Answered whole; a session is made of its partitions if there is room.
    Open,
    /// Reads the session's partitions; the answer leaves out the unchanged.
    /// `epoch` is the session's epoch once this request was taken.
    Incremental { id: i32, epoch: i32 },
}

/// The sessions of the broker.
#[derive(Default)]
pub struct FetchSessions {
    sessions: BTreeMap<i32, Session>,
    /// What the cached partitions of all sessions cost (`entry_bytes`).
    cached_bytes: usize,
    /// The driver's entropy, for ids (`set_entropy`).
    entropy: [u8; 32],
    ids_made: u64,
}

struct Session {
    epoch: i32,
    created_ms: i64,
    last_used_ms: i64,
    /// The partitions in the session's order: by sequence number.
    order: BTreeMap<u64, Cached>,
    /// Where each partition is in `order`.
    index: BTreeMap<Arc<str>, BTreeMap<i32, u64>>,
    next_seq: u64,
    bytes: usize,
}

/// One partition of a session: what the client last asked, and what it was
/// last told (`FetchSession.CachedPartition`).
struct Cached {
    topic: Arc<str>,
    asked: FetchPartition,
    high_watermark: i64,
    log_start_offset: i64,
}

/// What a partition's answer says, for deciding whether it must be sent.
pub struct Answered {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub error_code: i16,
    pub has_records: bool,
}

/// What one cached partition costs: its entries in the two maps, the struct,
/// and its topic's name, counted whole for each partition (names are shared
/// within a session, so this overcounts, never under).
fn entry_bytes(topic: &str) -> usize {
    limits::FETCH_SESSION_PARTITION_BYTES + topic.len()
}

/// What a session keeps of a partition's request: not its tagged fields,
/// which no version up to 12 defines and which would hold the request's
/// frame in memory (its bytes are slices of it).
fn cacheable(asked: &FetchPartition) -> FetchPartition {
    let mut asked = asked.clone();
    asked.unknown_tagged_fields.clear();
    asked
}

/// Kafka's `FetchMetadata.nextEpoch`.
fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

impl FetchSessions {
    /// The driver's random bytes, from which session ids are made.
    pub fn set_entropy(&mut self, entropy: [u8; 32]) {
        self.entropy = entropy;
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// A fetch comes in: decides what it does with sessions. An incremental
    /// fetch's partitions go into its session, and leave the request: it
    /// reads the session's (`topics`), filled in each time it is built, so
    /// a waiting request holds no copy of them (a client pipelining small
    /// incremental fetches would otherwise make the broker hold its whole
    /// session once for each).
    pub fn open(
        &mut self,
        now_ms: i64,
        req: &mut FetchRequest,
    ) -> Result<SessionUse, ResponseError> {
        if req.session_epoch == INITIAL_EPOCH || req.session_epoch == FINAL_EPOCH {
            if req.session_id != 0 {
                self.remove(req.session_id);
            }
            return Ok(if req.session_epoch == FINAL_EPOCH {
                SessionUse::Sessionless
            } else {
                SessionUse::Open
            });
        }
        let id = req.session_id;
        let others_bytes = self.cached_bytes;
        let Some(session) = self.sessions.get_mut(&id) else {
            return Err(ResponseError::FetchSessionIdNotFound);
        };
        if session.epoch != req.session_epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        // Counted as each partition is added, not once the request is in:
        // a request may name a million partitions.
        let others_bytes = others_bytes - session.bytes;
        let room = limits::FETCH_SESSIONS_CACHED_BYTES_MAX.saturating_sub(others_bytes);
        let mut over = false;
        'topics: for topic in &req.topics {
            for p in &topic.partitions {
                session.upsert(&topic.topic.0, p);
                if session.bytes > room {
                    over = true;
                    break 'topics;
                }
            }
        }
        for forgotten in &req.forgotten_topics_data {
            for &partition in &forgotten.partitions {
                session.forget(&forgotten.topic.0, partition);
            }
        }
        self.cached_bytes = others_bytes + session.bytes;
        if over {
            self.remove(id);
            return Err(ResponseError::FetchSessionIdNotFound);
        }
        let session = self.sessions.get_mut(&id).expect("found above");
        if session.order.is_empty() {
            // As Kafka: the fetch runs sessionless, on what it named.
            self.remove(id);
            return Ok(SessionUse::Sessionless);
        }
        session.last_used_ms = now_ms;
        session.epoch = next_epoch(session.epoch);
        req.topics = Vec::new();
        req.forgotten_topics_data = Vec::new();
        Ok(SessionUse::Incremental {
            id,
            epoch: session.epoch,
        })
    }

    /// The partitions of session `id`, in its order, as a request's topics
    /// (each with what the client last asked of it); none if it is gone.
    pub fn topics(&self, id: i32) -> Vec<FetchTopic> {
        self.sessions
            .get(&id)
            .map_or_else(Vec::new, Session::as_topics)
    }

    /// A full fetch's answer is built: makes a session of its partitions if
    /// there is room, and returns its id (0 if none was made). `response`
    /// answers `req` partition by partition.
    pub fn create(&mut self, now_ms: i64, req: &FetchRequest, response: &FetchResponse) -> i32 {
        let mut session = Session {
            epoch: next_epoch(INITIAL_EPOCH),
            created_ms: now_ms,
            last_used_ms: now_ms,
            order: BTreeMap::new(),
            index: BTreeMap::new(),
            next_seq: 0,
            bytes: 0,
        };
        let room = limits::FETCH_SESSIONS_CACHED_BYTES_MAX.saturating_sub(self.cached_bytes);
        for (topic, answered) in req.topics.iter().zip(&response.responses) {
            for (p, pd) in topic.partitions.iter().zip(&answered.partitions) {
                let seq = session.upsert(&topic.topic.0, p);
                let cached = session.order.get_mut(&seq).expect("just added");
                cached.high_watermark = pd.high_watermark;
                cached.log_start_offset = pd.log_start_offset;
                if session.bytes > room {
                    return 0; // counted as it grows
                }
            }
        }
        if session.order.is_empty() {
            return 0;
        }
        if self.sessions.len() >= limits::FETCH_SESSIONS_MAX
            && !self.evict_for(now_ms, session.order.len())
        {
            return 0;
        }
        let id = self.new_id();
        self.cached_bytes += session.bytes;
        self.sessions.insert(id, session);
        id
    }

    /// An incremental fetch's answer is built: says which of its partitions
    /// (`answered`, in the order of `topics` when it was built) must be sent,
    /// and remembers what they were told. Err if the session is gone or
    /// another request moved its epoch meanwhile.
    pub fn answer(
        &mut self,
        id: i32,
        epoch: i32,
        req: &FetchRequest,
        answered: &[Vec<Answered>],
    ) -> Result<Vec<Vec<bool>>, ResponseError> {
        let Some(session) = self.sessions.get_mut(&id) else {
            return Err(ResponseError::FetchSessionIdNotFound);
        };
        if session.epoch != epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        let mut keep = Vec::with_capacity(answered.len());
        for (topic, answers) in req.topics.iter().zip(answered) {
            let mut kept = Vec::with_capacity(answers.len());
            for (p, a) in topic.partitions.iter().zip(answers) {
                kept.push(session.must_send(&topic.topic.0, p.partition, a));
            }
            keep.push(kept);
        }
        Ok(keep)
    }

    fn remove(&mut self, id: i32) {
        if let Some(session) = self.sessions.remove(&id) {
            self.cached_bytes -= session.bytes;
        }
    }

    /// Makes room for a new session of `size` partitions
    /// (`FetchSessionCacheShard.tryEvict`, without privileged sessions:
    /// doze has no followers).
    fn evict_for(&mut self, now_ms: i64, size: usize) -> bool {
        let stalest = (self.sessions.iter())
            .min_by_key(|(id, s)| (s.last_used_ms, **id))
            .map(|(id, s)| (*id, s.last_used_ms));
        let Some((stalest, last_used_ms)) = stalest else {
            return false;
        };
        if now_ms - last_used_ms > limits::FETCH_SESSION_EVICTION_MS {
            self.remove(stalest);
            return true;
        }
        let smallest = (self.sessions.iter())
            .filter(|(_, s)| now_ms - s.created_ms > limits::FETCH_SESSION_EVICTION_MS)
            .min_by_key(|(id, s)| (s.order.len(), **id))
            .map(|(id, s)| (*id, s.order.len()));
        match smallest {
            // The new session's key has id 0, below every id: it wins only
            // with more partitions.
            Some((id, len)) if size > len => {
                self.remove(id);
                true
            }
            _ => false,
        }
    }

    fn new_id(&mut self) -> i32 {
        loop {
            self.ids_made += 1;
            let mut h = Sha256::new();
            h.update(self.entropy);
            h.update(b"fetch session");
            h.update(self.ids_made.to_be_bytes());
            let digest = h.finalize();
            let id = i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) & i32::MAX;
            if id != 0 && !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }
}

impl Session {
    /// Adds a partition at the end of the order, or updates what the client
    /// asks of one already there (keeping its place). Returns its sequence.
    fn upsert(&mut self, topic: &str, asked: &FetchPartition) -> u64 {
        if let Some(&seq) = self
            .index
            .get(topic)
            .and_then(|ps| ps.get(&asked.partition))
        {
            let cached = self.order.get_mut(&seq).expect("indexed");
            cached.asked = cacheable(asked);
            return seq;
        }
        let name: Arc<str> = match self.index.get_key_value(topic) {
            Some((name, _)) => name.clone(),
            None => Arc::from(topic),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += entry_bytes(topic);
        (self.index.entry(name.clone()).or_default()).insert(asked.partition, seq);
        self.order.insert(
            seq,
            Cached {
                topic: name,
                asked: cacheable(asked),
                high_watermark: -1,
                log_start_offset: -1,
            },
        );
        seq
    }

    fn forget(&mut self, topic: &str, partition: i32) {
        let Some(partitions) = self.index.get_mut(topic) else {
            return;
        };
        let Some(seq) = partitions.remove(&partition) else {
            return;
        };
        if partitions.is_empty() {
            self.index.remove(topic);
        }
        self.order.remove(&seq).expect("indexed");
        self.bytes -= entry_bytes(topic);
    }

    /// The session's partitions as a request's topics: consecutive
    /// partitions of one topic make one entry, so a topic the order split
    /// appears more than once (as Kafka's `FetchResponse.of` groups them).
    fn as_topics(&self) -> Vec<FetchTopic> {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for cached in self.order.values() {
            match topics.last_mut() {
                Some(last) if *last.topic.0 == *cached.topic => {
                    last.partitions.push(cached.asked.clone())
                }
                _ => topics.push(
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(cached.topic.to_string())))
                        .with_partitions(vec![cached.asked.clone()]),
                ),
            }
        }
        topics
    }

    /// `CachedPartition.maybeUpdateResponseData`, updating: whether the
    /// partition's answer must be sent. One that sends records moves to the
    /// end of the order.
    fn must_send(&mut self, topic: &str, partition: i32, a: &Answered) -> bool {
        let Some(&seq) = self.index.get(topic).and_then(|ps| ps.get(&partition)) else {
            // Not in the session: only a later request could have forgotten
            // it, and that would have moved the epoch. Send what it has.
            return a.has_records;
        };
        let cached = self.order.get_mut(&seq).expect("indexed");
        let mut must = a.has_records;
        if cached.high_watermark != a.high_watermark {
            cached.high_watermark = a.high_watermark;
            must = true;
        }
        if cached.log_start_offset != a.log_start_offset {
            cached.log_start_offset = a.log_start_offset;
            must = true;
        }
        if a.error_code != 0 {
            // Sent again once the error is gone.
            cached.high_watermark = -1;
            must = true;
        }
        if a.has_records {
            let cached = self.order.remove(&seq).expect("indexed");
            let new_seq = self.next_seq;
            self.next_seq += 1;
            self.order.insert(new_seq, cached);
            (self.index.get_mut(topic).expect("indexed")).insert(partition, new_seq);
        }
        must
    }
}
