//! Replays `conformance/recordings/*.json` against the core: each request is
//! built with kafka-protocol from the step's body, sent, and the named fields
//! of its response compared. See conformance/README.md for the format and
//! for where the expectations come from.

mod support;

use std::collections::BTreeMap;

use doze_core::BrokerConfig;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::*;
use serde_json::Value;
use support::requests::{create_topic, name};
use support::txn::tid;
use support::World;

fn recordings() -> Vec<(String, Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/recordings");
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
    assert!(out.len() >= 2, "the recordings are missing");
    out
}

struct Replay {
    w: World,
    saved: BTreeMap<String, i64>,
}

impl Replay {
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

    fn field(&self, body: &Value, key: &str, default: i64) -> i64 {
        body.get(key).map_or(default, |v| self.int(v))
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
                    .map(|(t, ps)| {
                        let ps = ps
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|p| p.as_i64().unwrap() as i32)
                            .collect();
                        AddPartitionsToTxnTopic::default()
                            .with_name(name(t))
                            .with_partitions(ps)
                    })
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
fn recordings_replay() {
    for (file, rec) in recordings() {
        let source = rec["source"].as_str().unwrap_or_default();
        assert!(
            source.contains("Not recorded"),
            "{file}: the source must say honestly where expectations come from"
        );
        let mut r = Replay {
            w: World::new(BrokerConfig::default()),
            saved: BTreeMap::new(),
        };
        for t in rec["setup"]["topics"].as_array().unwrap() {
            create_topic(
                &mut r.w,
                t["name"].as_str().unwrap(),
                t["partitions"].as_i64().unwrap() as i32,
            );
        }
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
