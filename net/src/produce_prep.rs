//! Produce requests prepared on the connection task
//! (`doze_core::recompress::prepare_frame`): every batch's records are read
//! and checked (`doze_core::produce_checks`), and the batches their topic
//! stores in another form (a codec its compression.type names, or a
//! compressed batch's inner offsets set right) are rebuilt here, beside
//! the core, before the frame is handed in with what was found
//! (`Input::CheckedFrame`). Decompressing and reading records is
//! the core's costliest work after compressing (issue 38, row A: a 529 KiB
//! request of small zstd batches held every other client 6.8 s).
//!
//! Compressing is the costliest thing a produce can ask (gzip at its default
//! level takes about 30 ms per MiB here, zstd at level 19 and up several
//! hundred), and the core is one thread that every client waits on. Kafka
//! does it on its request handler threads; doze does it on the blocking
//! pool, one request of a connection at a time so its requests keep their
//! order. The core still checks every record and stores correctly whatever
//! it is handed (`doze_core::recompress`): what is done here only saves it
//! the work. The core says which topics want it (`Output::TopicCompression`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use doze_core::produce_checks::{self, ProduceChecks};
use doze_core::topic_config::{ProducePrep, StoredCompression};
use doze_core::{batch, limits, recompress};
use kafka_protocol::messages::ApiKey;

/// The topics whose compression.type is not `producer`, as the core last
/// said (`Output::TopicCompression`), and the permits of the blocking
/// tasks that recompress (`limits::RECOMPRESS_TASKS_MAX`, one fewer than
/// the cores: the core task keeps one).
pub struct TopicCodecs {
    topics: RwLock<HashMap<String, ProducePrep>>,
    tasks: Arc<tokio::sync::Semaphore>,
}

impl Default for TopicCodecs {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let tasks = cores
            .saturating_sub(1)
            .clamp(1, limits::RECOMPRESS_TASKS_MAX);
        Self {
            topics: RwLock::default(),
            tasks: Arc::new(tokio::sync::Semaphore::new(tasks)),
        }
    }
}

impl TopicCodecs {
    pub fn set(&self, topic: String, prep: ProducePrep) {
        let mut map = self.topics.write().unwrap_or_else(|e| e.into_inner());
        match prep.compression {
            StoredCompression::Producer => map.remove(&topic),
            _ => map.insert(topic, prep),
        };
    }

    fn get(&self, topic: &str) -> Option<ProducePrep> {
        let map = self.topics.read().unwrap_or_else(|e| e.into_inner());
        map.get(topic).copied()
    }

    /// Whether `frame` is a Produce request that may have batches to
    /// prepare: cheap, for every frame.
    pub fn wants(&self, frame: &[u8]) -> bool {
        frame.get(..2) == Some(&(ApiKey::Produce as i16).to_be_bytes()[..])
            && !self
                .topics
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
    }
}

/// Whether `frame` is a Produce request: cheap, for every frame.
pub fn is_produce(frame: &[u8]) -> bool {
    frame.get(..2) == Some(&(ApiKey::Produce as i16).to_be_bytes()[..])
}

/// A Produce frame as it goes to the core.
pub struct Prepared {
    pub frame: Bytes,
    /// Its records as read (`None`: not a request the core reads records
    /// of; the core answers it as it came).
    pub checks: Option<ProduceChecks>,
    /// Batches rebuilt.
    pub recompressed: usize,
}

/// `recompress::prepare_frame`: the request's records read and checked,
/// and its batches rebuilt where their topic stores them in another form,
/// on the blocking pool once a task permit is free (inline under the
/// simulator, which has no blocking pool). A small request whose batches
/// are all uncompressed, none for a topic that stores a codec, costs about
/// its bytes: it is prepared here and waits for no permit. The connection
/// awaits it: its next request is read only after this one is handed in.
pub async fn prepare_off_core(frame: Bytes, codecs: Arc<TopicCodecs>) -> Prepared {
    if frame.len() <= limits::SMALL_REQUEST_BYTES_MAX && cheap(&frame, &codecs) {
        return prepare(frame, &codecs);
    }
    let Ok(_permit) = Arc::clone(&codecs.tasks).acquire_owned().await else {
        return Prepared {
            frame,
            checks: None,
            recompressed: 0,
        };
    };
    // Handed in as it came if the task panicked: the core reads it.
    #[cfg(not(madsim))]
    let as_came = frame.clone();
    let work = move || prepare(frame, &codecs);
    #[cfg(not(madsim))]
    return tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|_| Prepared {
            frame: as_came,
            checks: None,
            recompressed: 0,
        });
    #[cfg(madsim)]
    return work();
}

/// `frame` prepared as the core's `prepare_frame` does, with what `codecs`
/// says of its topics.
pub fn prepare(frame: Bytes, codecs: &TopicCodecs) -> Prepared {
    match recompress::prepare_frame(&frame, |topic| codecs.get(topic)) {
        Some(p) => Prepared {
            frame: p.frame,
            checks: Some(p.checks),
            recompressed: p.rebuilt,
        },
        None => Prepared {
            frame,
            checks: None,
            recompressed: 0,
        },
    }
}

/// Whether the request `frame` holds (false if it does not decode) has no
/// compressed batch (by its header) and none for a topic that stores a
/// codec: reading its records then costs about their bytes, and none is
/// rebuilt.
fn cheap(frame: &Bytes, codecs: &TopicCodecs) -> bool {
    let Some(decoded) = produce_checks::decode(frame) else {
        return false;
    };
    let uncompressed =
        |records: &[u8]| batch::parse_header(records).is_ok_and(|h| h.compression_code() == 0);
    let wanted = codecs.wants(frame);
    decoded.request.topic_data.iter().all(|t| {
        !(wanted && codecs.get(&t.name.0).is_some())
            && t.partition_data
                .iter()
                .filter_map(|p| p.records.as_deref())
                .all(uncompressed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::messages::{ProduceRequest, RequestHeader};
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::protocol::{Decodable, Encodable};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn batch(values: &[&str]) -> Bytes {
        let records: Vec<Record> = values
            .iter()
            .enumerate()
            .map(|(i, v)| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: -1,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // The encoder keeps records in one batch while offset -
                // sequence stays constant; the batch's base sequence is -1.
                sequence: i as i32 - 1,
                timestamp: 1_700_000_000_000,
                key: None,
                value: Some(Bytes::from(v.to_string())),
                headers: Default::default(),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        buf.freeze()
    }

    fn frame(version: i16, topics: &[&str]) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("prep-test")));
        let data = topics
            .iter()
            .map(|t| {
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(t.to_string())))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch(&["a", "bb", "ccc"])))])
            })
            .collect();
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(1000)
            .with_topic_data(data);
        let mut out = BytesMut::new();
        header
            .encode(&mut out, ApiKey::Produce.request_header_version(version))
            .unwrap();
        request.encode(&mut out, version).unwrap();
        out.freeze()
    }

    fn codecs_of(prepared: &Bytes, version: i16) -> Vec<(String, u8)> {
        let mut buf = prepared.clone();
        let header =
            RequestHeader::decode(&mut buf, ApiKey::Produce.request_header_version(version))
                .unwrap();
        assert_eq!(
            (header.correlation_id, header.request_api_version),
            (7, version)
        );
        let request = ProduceRequest::decode(&mut buf, version).unwrap();
        assert_eq!((request.acks, request.timeout_ms), (-1, 1000));
        request
            .topic_data
            .iter()
            .map(|t| {
                let records = t.partition_data[0].records.as_ref().unwrap();
                let h = doze_core::batch::check_batch(records).unwrap();
                assert_eq!(h.records_count, 3);
                (t.name.0.to_string(), h.compression_code())
            })
            .collect()
    }

    #[test]
    fn only_the_named_topics_batches_are_recompressed_and_the_rest_is_kept() {
        let codecs = TopicCodecs::default();
        let f = frame(9, &["plain", "zipped"]);
        assert!(!codecs.wants(&f), "no topic wants it yet");
        let prep = |compression| ProducePrep {
            compression,
            batch_bytes_max: 1 << 20,
        };
        codecs.set(
            "zipped".into(),
            prep(StoredCompression::Codec { code: 1, level: -1 }),
        );
        assert!(codecs.wants(&f));
        for version in [3, 7, 9] {
            let f = frame(version, &["plain", "zipped"]);
            let p = prepare(f, &codecs);
            assert_eq!(p.recompressed, 1);
            assert_eq!(p.checks.as_ref().map(|c| c.len()), Some(2));
            assert_eq!(
                codecs_of(&p.frame, version),
                [("plain".to_string(), 0), ("zipped".to_string(), 1)]
            );
            // Prepared once, nothing is left to do.
            let again = prepare(p.frame.clone(), &codecs);
            assert_eq!((again.recompressed, &again.frame), (0, &p.frame));
        }
        let plain = frame(9, &["plain"]);
        let p = prepare(plain.clone(), &codecs);
        assert_eq!((p.recompressed, p.frame), (0, plain));
        // Unserved versions and garbage are handed in as they came, unread.
        let mut v2 = frame(9, &["zipped"]).to_vec();
        v2[2..4].copy_from_slice(&2i16.to_be_bytes());
        let p = prepare(Bytes::from(v2.clone()), &codecs);
        assert_eq!((p.recompressed, &p.frame[..], p.checks), (0, &v2[..], None));
        let f = frame(9, &["zipped"]);
        let cut = f.slice(..f.len() - 5);
        let p = prepare(cut.clone(), &codecs);
        assert_eq!((p.recompressed, p.frame, p.checks), (0, cut, None));
        assert!(!codecs.wants(&[0, 1, 0, 12]));
        codecs.set("zipped".into(), prep(StoredCompression::Producer));
        assert!(!codecs.wants(&f));
    }
}
