//! Replays against the core, in process:
//! - `conformance/recordings/*.json`, recorded from Apache Kafka 4.3.1 by
//!   `make conformance-record` (the differential harness): each request is
//!   built with kafka-protocol from the step's body (Kafka's JSON names), and
//!   the fields this replayer reads are compared with Kafka's answer;
//! - `conformance/derived/*.json`: orderings no real broker can be held in
//!   (disk and meta.db work paused with `io` steps), whose expectations come
//!   from Kafka's source, as each file's `source` says.
//!
//! See conformance/README.md for both formats.

mod support;

use std::collections::BTreeMap;

use doze_core::BrokerConfig;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::*;
use serde_json::Value;
use support::requests::{create_topic, name};
use support::txn::tid;
use support::World;

fn json_files(sub: &str) -> Vec<(String, Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../conformance")
        .join(sub);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("conformance/recordings exists") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            let v: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            out.push((path.file_name().unwrap().to_string_lossy().to_string(), v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "conformance/{sub} is empty");
    out
}

/// An AddPartitionsToTxn (v3) topic from its name and a JSON array of
/// partition numbers.
fn txn_topic(topic: &str, partitions: &Value) -> AddPartitionsToTxnTopic {
    let partitions = partitions
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_i64().unwrap() as i32)
        .collect();
    AddPartitionsToTxnTopic::default()
        .with_name(name(topic))
        .with_partitions(partitions)
}

struct Replay {
    w: World,
    saved: BTreeMap<String, i64>,
}

impl Replay {
    /// A fresh core with the file's `setup.topics` created.
    fn start(rec: &Value) -> Self {
        let mut w = World::new(BrokerConfig::default());
        for t in rec["setup"]["topics"].as_array().unwrap() {
            let partitions = t["partitions"].as_i64().unwrap() as i32;
            create_topic(&mut w, t["name"].as_str().unwrap(), partitions);
        }
        Self {
            w,
            saved: BTreeMap::new(),
        }
    }

    fn int(&self, v: &Value) -> i64 {
        match v {
            Value::String(s) if s.starts_with('$') => *self
                .saved
                .get(&s[1..])
                .unwrap_or_else(|| panic!("{s} not saved")),
            Value::Number(n) => n.as_i64().unwrap(),
            other => panic!("not an integer: {other}"),
        }
    }

    /// An integer field of a body (a literal or a saved `$name`); absent or
    /// null: `default`.
    fn field(&self, body: &Value, key: &str, default: i64) -> i64 {
        body.get(key)
            .filter(|v| !v.is_null())
            .map_or(default, |v| self.int(v))
    }

    fn send(&mut self, conn: u64, api: &str, version: i16, body: &Value) {
        let id = body
            .get("transactional_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let pid = ProducerId(self.field(body, "producer_id", -1));
        let epoch = self.field(body, "producer_epoch", -1) as i16;
        match api {
            "InitProducerId" => {
                let req = InitProducerIdRequest::default()
                    .with_transactional_id(Some(tid(&id)))
                    .with_transaction_timeout_ms(
                        self.field(body, "transaction_timeout_ms", 60_000) as i32
                    )
                    .with_producer_id(pid)
                    .with_producer_epoch(epoch);
                self.w.send(conn, version, &req);
            }
            "EndTxn" => {
                let req = EndTxnRequest::default()
                    .with_transactional_id(tid(&id))
                    .with_producer_id(pid)
                    .with_producer_epoch(epoch)
                    .with_committed(body["committed"].as_bool().unwrap());
                self.w.send(conn, version, &req);
            }
            "AddPartitionsToTxn" => {
                let topics = body["topics"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(t, ps)| txn_topic(t, ps))
                    .collect();
                let req = AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(tid(&id))
                    .with_v3_and_below_producer_id(pid)
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(topics);
                self.w.send(conn, version, &req);
            }
            other => panic!("the replayer does not know {other}; add it"),
        }
    }

    /// The response's fields as (name, value) for comparison.
    fn fields(response: &ResponseKind) -> BTreeMap<String, Value> {
        let mut m = BTreeMap::new();
        match response {
            ResponseKind::InitProducerId(r) => {
                m.insert("error_code".into(), r.error_code.into());
                m.insert("producer_id".into(), r.producer_id.0.into());
                m.insert("producer_epoch".into(), r.producer_epoch.into());
            }
            ResponseKind::EndTxn(r) => {
                m.insert("error_code".into(), r.error_code.into());
            }
            ResponseKind::AddPartitionsToTxn(r) => {
                let codes: Vec<Value> = r
                    .results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| {
                        t.results_by_partition
                            .iter()
                            .map(|p| Value::from(p.partition_error_code))
                    })
                    .collect();
                m.insert("partition_error_codes".into(), Value::Array(codes));
            }
            other => panic!("no field reader for {other:?}"),
        }
        m
    }
}

#[test]
fn derived_orderings_replay() {
    for (file, rec) in json_files("derived") {
        let source = rec["source"].as_str().unwrap_or_default();
        assert!(
            source.contains("Not recorded"),
            "{file}: the source must say honestly where expectations come from"
        );
        let mut r = Replay::start(&rec);
        for (i, step) in rec["steps"].as_array().unwrap().iter().enumerate() {
            let at = format!("{file} step {i}");
            if let Some(io) = step.get("io").and_then(Value::as_str) {
                match io {
                    "hold" => r.w.auto_io = false,
                    "complete" => r.w.complete_io(),
                    "release" => {
                        r.w.auto_io = true;
                        r.w.drain();
                    }
                    other => panic!("{at}: unknown io step {other}"),
                }
                continue;
            }
            let conn = step.get("conn").and_then(Value::as_u64).unwrap_or(1);
            let version = step["version"].as_i64().unwrap() as i16;
            if let Some(api) = step.get("request").and_then(Value::as_str) {
                r.send(conn, api, version, &step["body"]);
            }
            let expect = step["expect"].as_object().unwrap();
            let answer = r.w.recv(conn);
            if expect.get("answer").and_then(Value::as_str) == Some("none_yet") {
                assert!(answer.is_none(), "{at}: answered too early: {answer:?}");
                continue;
            }
            let (_, response) = answer.unwrap_or_else(|| panic!("{at}: no answer"));
            let got = Replay::fields(&response);
            for (k, want) in expect {
                let have = got
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}: response has no {k}"));
                let want = match want {
                    Value::String(s) if s.starts_with('$') => Value::from(r.int(want)),
                    other => other.clone(),
                };
                assert_eq!(have, &want, "{at}: {k}");
            }
            if let Some(save) = step.get("save").and_then(Value::as_object) {
                for (field, var) in save {
                    let v = got[field].as_i64().unwrap();
                    r.saved.insert(var.as_str().unwrap().to_string(), v);
                }
            }
        }
    }
}

// ---- recordings from Apache Kafka 4.3.1 ----

/// The APIs this replayer can build; a recording using another is played
/// only by the differential harness (`make conformance-kafka`).
const REPLAYABLE: [&str; 4] = ["InitProducerId", "EndTxn", "AddPartitionsToTxn", "Produce"];

impl Replay {
    /// Sends a recorded step's request (Kafka's JSON names) on connection 1.
    fn send_recorded(&mut self, api: &str, version: i16, body: &Value) {
        let pid = ProducerId(self.field(body, "producerId", -1));
        let epoch = self.field(body, "producerEpoch", -1) as i16;
        match api {
            "InitProducerId" => {
                let id = body["transactionalId"].as_str().map(tid);
                let req = InitProducerIdRequest::default()
                    .with_transactional_id(id)
                    .with_transaction_timeout_ms(
                        self.field(body, "transactionTimeoutMs", 60_000) as i32
                    )
                    .with_producer_id(pid)
                    .with_producer_epoch(epoch);
                self.w.send(1, version, &req);
            }
            "EndTxn" => {
                let req = EndTxnRequest::default()
                    .with_transactional_id(tid(body["transactionalId"].as_str().unwrap()))
                    .with_producer_id(pid)
                    .with_producer_epoch(epoch)
                    .with_committed(body["committed"].as_bool().unwrap());
                self.w.send(1, version, &req);
            }
            "AddPartitionsToTxn" => {
                let topics = body["v3AndBelowTopics"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| txn_topic(t["name"].as_str().unwrap(), &t["partitions"]))
                    .collect();
                let req = AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(tid(body["v3AndBelowTransactionalId"]
                        .as_str()
                        .unwrap()))
                    .with_v3_and_below_producer_id(ProducerId(self.field(
                        body,
                        "v3AndBelowProducerId",
                        -1,
                    )))
                    .with_v3_and_below_producer_epoch(self.field(
                        body,
                        "v3AndBelowProducerEpoch",
                        -1,
                    ) as i16)
                    .with_v3_and_below_topics(topics);
                self.w.send(1, version, &req);
            }
            "Produce" => {
                let topic = &body["topicData"][0];
                let part = &topic["partitionData"][0];
                let spec = &part["records"];
                let values: Vec<Vec<u8>> = spec["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().as_bytes().to_vec())
                    .collect();
                let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
                let producer = support::Producer {
                    id: self.field(spec, "producerId", -1),
                    epoch: self.field(spec, "producerEpoch", -1) as i16,
                    sequence: self.field(spec, "baseSequence", -1) as i32,
                    transactional: spec["transactional"].as_bool().unwrap_or(false),
                };
                let batch = support::producer_batch(
                    &refs,
                    1_700_000_000_000,
                    kafka_protocol::records::Compression::None,
                    producer,
                );
                let mut req = support::requests::produce_req(
                    topic["name"].as_str().unwrap(),
                    part["index"].as_i64().unwrap() as i32,
                    batch,
                    self.field(body, "acks", -1) as i16,
                );
                req.transactional_id = body["transactionalId"].as_str().map(tid);
                self.w.send(1, version, &req);
            }
            other => panic!("{other} is not replayable"),
        }
    }

    /// The fields this replayer compares, in the recording's names, with
    /// producer ids shown as the names they were saved under.
    fn recorded_fields(&self, response: &ResponseKind) -> BTreeMap<String, Value> {
        let named = |id: i64| {
            self.saved
                .iter()
                .find(|(_, v)| **v == id)
                .map_or(Value::from(id), |(k, _)| Value::from(format!("${k}")))
        };
        let mut m = BTreeMap::new();
        match response {
            ResponseKind::InitProducerId(r) => {
                m.insert("errorCode".into(), r.error_code.into());
                m.insert("producerEpoch".into(), r.producer_epoch.into());
                if r.error_code == 0 {
                    m.insert("producerId".into(), named(r.producer_id.0));
                }
            }
            ResponseKind::EndTxn(r) => {
                m.insert("errorCode".into(), r.error_code.into());
            }
            ResponseKind::AddPartitionsToTxn(r) => {
                for t in &r.results_by_topic_v3_and_below {
                    for p in &t.results_by_partition {
                        let key = format!("{}/{}", t.name.0.as_str(), p.partition_index);
                        m.insert(key, p.partition_error_code.into());
                    }
                }
            }
            ResponseKind::Produce(r) => {
                for t in &r.responses {
                    for p in &t.partition_responses {
                        let key = format!("{}/{}", t.name.0.as_str(), p.index);
                        m.insert(key.clone() + " errorCode", p.error_code.into());
                        m.insert(key + " baseOffset", p.base_offset.into());
                    }
                }
            }
            other => panic!("no field reader for {other:?}"),
        }
        m
    }

    /// The same fields of Kafka's recorded (normalised) answer.
    fn recorded(api: &str, response: &Value) -> BTreeMap<String, Value> {
        let mut m = BTreeMap::new();
        match api {
            "InitProducerId" => {
                m.insert("errorCode".into(), response["errorCode"].clone());
                m.insert("producerEpoch".into(), response["producerEpoch"].clone());
                if response["errorCode"] == 0
                    && response["producerId"]
                        .as_str()
                        .is_some_and(|s| s.starts_with('$'))
                {
                    m.insert("producerId".into(), response["producerId"].clone());
                }
            }
            "EndTxn" => {
                m.insert("errorCode".into(), response["errorCode"].clone());
            }
            "AddPartitionsToTxn" => {
                for t in response["resultsByTopicV3AndBelow"].as_array().unwrap() {
                    for p in t["resultsByPartition"].as_array().unwrap() {
                        let key =
                            format!("{}/{}", t["name"].as_str().unwrap(), p["partitionIndex"]);
                        m.insert(key, p["partitionErrorCode"].clone());
                    }
                }
            }
            "Produce" => {
                for t in response["responses"].as_array().unwrap() {
                    for p in t["partitionResponses"].as_array().unwrap() {
                        let key = format!("{}/{}", t["name"].as_str().unwrap(), p["index"]);
                        m.insert(key.clone() + " errorCode", p["errorCode"].clone());
                        m.insert(key + " baseOffset", p["baseOffset"].clone());
                    }
                }
            }
            other => panic!("{other} is not replayable"),
        }
        m
    }
}

/// `{run}` in the recording's names, as the core's topics are named.
fn unrun(v: &Value) -> Value {
    serde_json::from_str(&v.to_string().replace("{run}", "r")).unwrap()
}

#[test]
fn kafka_recordings_replay() {
    let mut replayed = Vec::new();
    for (file, rec) in json_files("recordings") {
        let source = rec["source"].as_str().unwrap_or_default();
        assert!(
            source.contains("Recorded from Apache Kafka 4.3.1"),
            "{file}: {source}"
        );
        let rec = unrun(&rec);
        let steps = rec["steps"].as_array().unwrap();
        let replayable = steps.iter().all(|s| {
            s.get("sleep_ms").is_some()
                || (s
                    .get("request")
                    .and_then(Value::as_str)
                    .is_some_and(|a| REPLAYABLE.contains(&a))
                    && s.get("conn").is_none())
        });
        if !replayable {
            continue;
        }
        let mut r = Replay::start(&rec);
        for (i, step) in steps.iter().enumerate() {
            if step.get("sleep_ms").is_some() {
                continue;
            }
            let at = format!("{file} step {i}");
            let api = step["request"].as_str().unwrap();
            let version = step["version"].as_i64().unwrap() as i16;
            let retry_while: Vec<Value> = step
                .get("retry_while")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut tries = 0;
            let response = loop {
                r.send_recorded(api, version, &step["body"]);
                let (_, response) = r.w.recv(1).unwrap_or_else(|| panic!("{at}: no answer"));
                // As the harness (and Kafka's clients) retry: resend while
                // an error the step names is answered (the core finishes the
                // work that caused it as its I/O completes).
                let is_code =
                    |k: &str| k.ends_with("errorCode") || !k.contains(' ') && k.contains('/');
                let retry = r
                    .recorded_fields(&response)
                    .iter()
                    .any(|(k, v)| is_code(k) && retry_while.contains(v));
                tries += 1;
                if !retry || tries == 10 {
                    break response;
                }
                r.w.advance(50);
            };
            if let Some(save) = step.get("save").and_then(Value::as_object) {
                for (field, var) in save {
                    let v = match &response {
                        ResponseKind::InitProducerId(x) if field == "producerId" => x.producer_id.0,
                        other => panic!("{at}: cannot save {field} of {other:?}"),
                    };
                    r.saved.insert(var.as_str().unwrap().to_string(), v);
                }
            }
            let got = r.recorded_fields(&response);
            let want = Replay::recorded(api, &step["response"]);
            for (k, want) in &want {
                let have = got
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}: doze has no {k}: {got:?}"));
                // A racy step recorded its codes as "one of [..]".
                let ok = match want.as_str() {
                    Some(s) if s.starts_with("one of ") => s.contains(&have.to_string()),
                    _ => have == want,
                };
                assert!(
                    ok,
                    "{at}: {k}: Kafka 4.3.1 answered {want}, the core {have}"
                );
            }
        }
        replayed.push(rec["name"].as_str().unwrap().to_string());
    }
    for must in [
        "endtxn-decisions",
        "endtxn-while-preparing",
        "init-producer-id",
    ] {
        assert!(
            replayed.iter().any(|n| n == must),
            "{must} was not replayed: {replayed:?}"
        );
    }
}
