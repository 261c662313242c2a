//! The log cleaner through the broker: a compacted topic keeps each key's
//! latest record (offsets kept, gaps seen), tombstones go only after
//! delete.retention.ms, aborted transactions go and markers after them,
//! nothing at or above the last stable offset is touched, and a crash or a
//! power cut at every step of a pass leaves the log either as it was or as
//! cleaned, never less (the oracle: `check_compacted`).

mod support;

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};

use doze_core::BrokerConfig;
use support::requests::*;
use support::txn::*;
use support::*;

const DELETE_RETENTION_MS: i64 = 60_000;

fn config() -> BrokerConfig {
    BrokerConfig {
        segment_bytes: 1024,
        cleaner_backoff_ms: 1_000,
        ..Default::default()
    }
}

fn create_compacted(w: &mut World, topic: &str) {
    let delete_retention_ms = DELETE_RETENTION_MS.to_string();
    let configs = [
        ("cleanup.policy", "compact"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", delete_retention_ms.as_str()),
    ];
    let (code, message) = create_with(w, topic, &configs);
    assert_eq!(code, 0, "{message:?}");
}

const PLAIN: Producer = Producer {
    id: -1,
    epoch: -1,
    sequence: -1,
    transactional: false,
};

/// One record written: its key and value (None: a tombstone).
type Written = (i64, String, Option<String>);

fn put(w: &mut World, key: &str, value: Option<&str>) -> i64 {
    put_as(w, PLAIN, key, value)
}

/// One record from `producer` (plain, or a transaction's): its offset.
fn put_as(w: &mut World, producer: Producer, key: &str, value: Option<&str>) -> i64 {
    let b = keyed_batch(
        &[(key.as_bytes(), value.map(str::as_bytes))],
        w.now_ms,
        Compression::None,
        producer,
    );
    w.send(1, 9, &produce_req("c", 0, b, -1));
    let (err, offset) = produce_answer(w, 1).expect("produce answered");
    assert_eq!(err, 0);
    offset
}

/// A transactional producer's identity with the sequence of its next batch.
fn txn_producer(id: i64, epoch: i16, sequence: i32) -> Producer {
    Producer {
        id,
        epoch,
        sequence,
        transactional: true,
    }
}

/// A record as a read_uncommitted consumer sees it.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    offset: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    control: bool,
}

/// Reads the whole partition from offset 0, data and control records.
/// Under read_committed it skips aborted batches as the Java consumer does
/// (`CompletedFetch`): a producer listed as aborted from a transaction's
/// first offset stays skipped until its abort marker, whatever comes before.
fn read_all(w: &mut World, read_committed: bool) -> Vec<Seen> {
    let mut out: Vec<Seen> = Vec::new();
    let mut offset = 0;
    for _ in 0..10_000 {
        w.send(2, 12, &fetch_isolated("c", 0, offset, read_committed));
        let p = fetch_answer(w, 2).expect("fetch answered");
        assert_eq!(p.error_code, 0, "fetch at {offset}");
        let mut records = whole_batches(&p.records.clone().unwrap_or_default());
        if records.is_empty() {
            return out;
        }
        let mut listed: Vec<(i64, i64)> = p
            .aborted_transactions
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|a| (a.first_offset, a.producer_id.0))
            .collect();
        listed.sort();
        let mut listed = listed.into_iter().peekable();
        let mut skipping = std::collections::BTreeSet::new();
        let sets = RecordBatchDecoder::decode_all(&mut records).expect("batches decode");
        let before = offset;
        for set in sets {
            let Some(last) = set.records.last().map(|r| r.offset) else {
                continue;
            };
            while let Some((first, pid)) = listed.next_if(|(first, _)| *first <= last) {
                let _ = first;
                skipping.insert(pid);
            }
            for r in set.records {
                offset = offset.max(r.offset + 1);
                let skip = read_committed && r.transactional && skipping.contains(&r.producer_id);
                if r.control && skip {
                    // Only an abort marker ends the skipping; a listed
                    // producer's commit marker would be a broker's bug.
                    let abort = r.key.as_deref().is_some_and(|k| k.len() >= 4 && k[3] == 0);
                    if abort {
                        skipping.remove(&r.producer_id);
                    }
                    continue;
                }
                if skip {
                    continue;
                }
                if r.offset >= before {
                    out.push(Seen {
                        offset: r.offset,
                        key: r.key,
                        value: r.value,
                        control: r.control,
                    });
                }
            }
        }
        if offset == before {
            // A batch emptied by the cleaner: step over it by its header.
            let header = doze_core::batch::parse_header(&p.records.unwrap()).unwrap();
            offset = header.last_offset() + 1;
        }
    }
    panic!("read_all did not end");
}

/// The compaction oracle: every key's latest record is there with its
/// value (or is a tombstone that may have gone); a record that is not its
/// key's latest lies at or above `cleaned_below`; offsets only grow.
fn check_compacted(seen: &[Seen], written: &[Written], cleaned_below: i64) {
    let mut latest: BTreeMap<&str, (i64, &Option<String>)> = BTreeMap::new();
    for (offset, key, value) in written {
        latest.insert(key, (*offset, value));
    }
    let data: Vec<&Seen> = seen.iter().filter(|s| !s.control).collect();
    assert!(
        data.windows(2).all(|p| p[0].offset < p[1].offset),
        "offsets grow"
    );
    for (key, (offset, value)) in &latest {
        let found = data.iter().find(|s| s.offset == *offset);
        match (value, found) {
            (Some(v), Some(s)) => {
                assert_eq!(s.key.as_deref(), Some(key.as_bytes()));
                assert_eq!(s.value.as_deref(), Some(v.as_bytes()), "key {key}");
            }
            (Some(_), None) => panic!("the latest record of {key} (offset {offset}) is gone"),
            (None, _) => {} // a tombstone: may be gone once its horizon passed
        }
    }
    for s in &data {
        let key = std::str::from_utf8(s.key.as_deref().expect("keyed")).unwrap();
        // The cleaner keeps a record whose key has a newer one only past
        // where it has cleaned (its map does not reach there yet).
        let newer_cleaned = written
            .iter()
            .find(|(o, k, _)| k == key && *o > s.offset && *o < cleaned_below);
        assert!(
            s.offset >= cleaned_below || newer_cleaned.is_none(),
            "offset {} of {key} survived though {:?} is newer, below {cleaned_below}",
            s.offset,
            newer_cleaned
        );
        let written_value = written
            .iter()
            .find(|(o, _, _)| *o == s.offset)
            .map(|w| &w.2);
        assert_eq!(
            s.value.as_deref(),
            written_value.unwrap().as_deref().map(str::as_bytes),
            "a record's value never changes"
        );
    }
}

/// Writes `n` overwrites of 10 keys, one batch each.
fn overwrite(w: &mut World, written: &mut Vec<Written>, n: usize, round: usize) {
    for i in 0..n {
        let key = format!("k{}", i % 10);
        let value = format!("v{round}-{i}-{}", "x".repeat(40));
        let offset = put(w, &key, Some(&value));
        written.push((offset, key, Some(value)));
        w.advance(10);
    }
}

/// Lets the cleaner run: ticks until it has made `passes` passes.
fn clean(w: &mut World, passes: u64) {
    for _ in 0..200 {
        let done = w
            .broker
            .cleaner_progress("c", 0)
            .is_some_and(|p| p.passes >= passes);
        if done {
            return;
        }
        w.advance(500);
    }
    panic!(
        "the cleaner did not make {passes} passes: {:?}",
        w.broker.cleaner_progress("c", 0)
    );
}

#[test]
fn overwrites_and_tombstones_are_compacted_and_survive_restarts() {
    let mut w = World::new(config());
    create_compacted(&mut w, "c");
    let mut written = Vec::new();
    overwrite(&mut w, &mut written, 150, 0);
    // k3 is deleted: its tombstone is its last write.
    let offset = put(&mut w, "k3", None);
    written.push((offset, "k3".into(), None));
    for i in 0..60 {
        let key = format!("k{}", [0, 1, 2, 4][i % 4]);
        let value = format!("late-{i}");
        let offset = put(&mut w, &key, Some(&value));
        written.push((offset, key, Some(value)));
        w.advance(10);
    }
    clean(&mut w, 1);
    let progress = w.broker.cleaner_progress("c", 0).unwrap();
    let seen = read_all(&mut w, false);
    check_compacted(&seen, &written, progress.first_dirty_offset);
    assert!(
        seen.len() * 3 < written.len(),
        "{} of {} records left",
        seen.len(),
        written.len()
    );
    let tombstone_kept = seen.iter().any(|s| s.offset == offset && s.value.is_none());
    assert!(tombstone_kept, "a tombstone stays for delete.retention.ms");

    // After a clean stop, and after a power cut, nothing is lost (and the
    // cleaner, which counts the whole log dirty after a start, may have
    // cleaned more); the tombstone is still within its horizon.
    for power_cut in [false, true] {
        if power_cut {
            w.restart(true);
        } else {
            w.stop_and_restart();
        }
        let again = read_all(&mut w, false);
        check_compacted(&again, &written, 0);
        assert!(
            again.iter().all(|s| seen.contains(s)),
            "only what was there before"
        );
        assert!(again
            .iter()
            .any(|s| s.offset == offset && s.value.is_none()));
    }

    // Past delete.retention.ms, the next pass removes the tombstone.
    w.advance(DELETE_RETENTION_MS + 1);
    let passes = w.broker.cleaner_progress("c", 0).map_or(0, |p| p.passes);
    overwrite(&mut w, &mut written, 100, 1);
    clean(&mut w, passes + 1);
    let progress = w.broker.cleaner_progress("c", 0).unwrap();
    let seen = read_all(&mut w, false);
    check_compacted(&seen, &written, progress.first_dirty_offset);
    assert!(
        seen.iter().all(|s| s.offset != offset),
        "the tombstone is gone once its horizon passed"
    );
}

#[test]
fn aborted_transactions_go_and_markers_follow() {
    let mut w = World::new(config());
    create_compacted(&mut w, "c");
    let mut written = Vec::new();
    let (err, pid, epoch) = init_txn(&mut w, 5, "tx", 60_000);
    assert_eq!(err, 0);
    let mut seq = 0;
    let mut aborted_offsets = Vec::new();
    for round in 0..12 {
        let commit = round % 3 != 1;
        assert_eq!(
            add_partitions(&mut w, 5, "tx", pid, epoch, &[("c", 0)]),
            vec![0]
        );
        for i in 0..3 {
            let key = format!("k{}", (round * 3 + i) % 7);
            let value = format!("t{round}-{i}-{}", "y".repeat(40));
            let offset = put_as(&mut w, txn_producer(pid, epoch, seq), &key, Some(&value));
            seq += 1;
            if commit {
                written.push((offset, key, Some(value)));
            } else {
                aborted_offsets.push(offset);
            }
        }
        assert_eq!(end_txn(&mut w, 5, "tx", pid, epoch, commit), Some(0));
        w.advance(10);
    }
    // Plain writes after, so the transactional segments close.
    overwrite(&mut w, &mut written, 40, 0);
    clean(&mut w, 1);
    let progress = w.broker.cleaner_progress("c", 0).unwrap();
    let seen = read_all(&mut w, true);
    let cleaned_below = progress.first_dirty_offset;
    check_compacted(&seen, &written, cleaned_below);
    let raw = read_all(&mut w, false);
    for offset in &aborted_offsets {
        assert!(
            *offset >= cleaned_below || raw.iter().all(|s| s.offset != *offset),
            "aborted record at {offset} survived cleaning below {cleaned_below}"
        );
    }
    let markers_before = raw.iter().filter(|s| s.control).count();
    assert!(markers_before > 0, "markers stay for delete.retention.ms");

    // Markers of transactions with nothing left get a delete horizon from
    // the pass that first finds them so, and go with the first pass after it.
    let mut progress = progress;
    for round in 1..4 {
        w.advance(DELETE_RETENTION_MS + 1);
        let passes = w.broker.cleaner_progress("c", 0).map_or(0, |p| p.passes);
        overwrite(&mut w, &mut written, 60, round);
        clean(&mut w, passes + 1);
        progress = w.broker.cleaner_progress("c", 0).unwrap();
    }
    let raw = read_all(&mut w, false);
    let markers_after = raw
        .iter()
        .filter(|s| s.control && s.offset < progress.first_dirty_offset)
        .count();
    assert!(
        markers_after < markers_before,
        "markers after the horizon: {markers_after} of {markers_before}"
    );
    check_compacted(
        &read_all(&mut w, true),
        &written,
        progress.first_dirty_offset,
    );
    w.restart(true);
    check_compacted(
        &read_all(&mut w, true),
        &written,
        progress.first_dirty_offset,
    );
}

#[test]
fn an_open_transaction_bounds_the_pass() {
    let mut w = World::new(config());
    create_compacted(&mut w, "c");
    let mut written = Vec::new();
    overwrite(&mut w, &mut written, 30, 0);
    let (_, pid, epoch) = init_txn(&mut w, 5, "open", 60_000);
    assert_eq!(
        add_partitions(&mut w, 5, "open", pid, epoch, &[("c", 0)]),
        vec![0]
    );
    let lso = put_as(
        &mut w,
        txn_producer(pid, epoch, 0),
        "k1",
        Some("open-value"),
    );
    let before_lso = written.len();
    overwrite(&mut w, &mut written, 120, 1);
    let all_before = read_all(&mut w, false);
    clean(&mut w, 1);
    let progress = w.broker.cleaner_progress("c", 0).unwrap();
    assert!(
        progress.first_dirty_offset <= lso,
        "nothing at or above the LSO is cleaned"
    );
    let after = read_all(&mut w, false);
    let above = |v: &[Seen]| {
        v.iter()
            .filter(|s| s.offset >= lso)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        above(&after),
        above(&all_before),
        "at and above the LSO all stays"
    );
    let below = after.iter().filter(|s| s.offset < lso).count();
    assert!(
        below < before_lso,
        "below the LSO it was cleaned: {below} of {before_lso}"
    );
    // read_committed: nothing at or past the open transaction yet.
    let committed = read_all(&mut w, true);
    assert!(committed.iter().all(|s| s.offset < lso));
}

#[test]
fn compressed_batches_are_compacted_in_their_codec() {
    let mut w = World::new(config());
    create_compacted(&mut w, "c");
    let mut written = Vec::new();
    for (round, codec) in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ]
    .into_iter()
    .cycle()
    .take(40)
    .enumerate()
    {
        let keys: Vec<String> = (0..4).map(|i| format!("k{}", (round + i) % 6)).collect();
        let values: Vec<String> = (0..4)
            .map(|i| format!("c{round}-{i}-{}", "z".repeat(60)))
            .collect();
        let records: Vec<(&[u8], Option<&[u8]>)> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| (k.as_bytes(), Some(v.as_bytes())))
            .collect();
        let b = keyed_batch(&records, w.now_ms, codec, PLAIN);
        w.send(1, 9, &produce_req("c", 0, b, -1));
        let (e, base) = produce_answer(&mut w, 1).unwrap();
        assert_eq!(e, 0);
        for (i, (k, v)) in keys.into_iter().zip(values).enumerate() {
            written.push((base + i as i64, k, Some(v)));
        }
        w.advance(10);
    }
    clean(&mut w, 1);
    let progress = w.broker.cleaner_progress("c", 0).unwrap();
    let seen = read_all(&mut w, false);
    check_compacted(&seen, &written, progress.first_dirty_offset);
    assert!(seen.len() < written.len());
}

/// Runs a pass with I/O completed by hand, and at step `cut` (a count of
/// completions) restarts the broker, with a power cut or not; the log must
/// read back compacted-or-not, never less, and a later pass must finish.
fn crash_at(cut: usize, power_cut: bool) {
    eprintln!("crash at {cut}, power cut {power_cut}");
    let mut w = World::new(config());
    create_compacted(&mut w, "c");
    let mut written = Vec::new();
    overwrite(&mut w, &mut written, 120, 0);
    let before = read_all(&mut w, false);
    w.auto_io = false;
    w.advance(2_000);
    let mut steps = 0;
    while steps < cut {
        let idle = w.pending_syncs.is_empty()
            && w.pending_meta.is_empty()
            && w.pending_reads.is_empty()
            && w.pending_cleaner_work.is_empty();
        if idle {
            break;
        }
        w.complete_io();
        steps += 1;
    }
    w.auto_io = true;
    if std::env::var("DEBUG_CLEAN").is_ok() {
        eprintln!(
            "files {:?}",
            w.files()
                .iter()
                .map(|(k, f)| (k.1, k.2, f.data.len(), f.synced_len))
                .collect::<Vec<_>>()
        );
        eprintln!("staged {:?}", w.staged());
    }
    w.restart(power_cut);
    let seen = read_all(&mut w, false);
    if std::env::var("DEBUG_CLEAN").is_ok() {
        eprintln!(
            "seen {:?}",
            seen.iter().map(|s| s.offset).collect::<Vec<_>>()
        );
        eprintln!("progress {:?}", w.broker.cleaner_progress("c", 0));
        let log = w.broker.partition("c", 0).unwrap();
        eprintln!(
            "segments {:?}",
            log.segments()
                .map(|s| (s.base_offset, s.size_bytes, s.next_offset))
                .collect::<Vec<_>>()
        );
    }
    check_compacted(&seen, &written, 0);
    // Every record is one that was written, in the same place.
    for s in &seen {
        assert!(
            before.contains(s),
            "record at {} was not in the log before",
            s.offset
        );
    }
    // And the cleaner finishes after the restart.
    clean(&mut w, 1);
    let progress = w.broker.cleaner_progress("c", 0).unwrap();
    check_compacted(
        &read_all(&mut w, false),
        &written,
        progress.first_dirty_offset,
    );
}

#[test]
fn a_crash_at_any_step_of_a_pass_loses_nothing() {
    for cut in 0..60 {
        crash_at(cut, false);
        crash_at(cut, true);
    }
}

/// A transactional producer aborts once and then commits: once the abort
/// marker's horizon has passed and a pass took it out, the aborted
/// transaction must no longer be listed to read_committed fetches (a
/// consumer would skip the producer's records until an abort marker that
/// never comes), and the committed records all stay.
#[test]
fn committed_records_outlive_an_aborted_transactions_marker() {
    let mut w = World::new(BrokerConfig {
        segment_bytes: 512,
        ..config()
    });
    create_compacted(&mut w, "c");
    let (err, pid, epoch) = init_txn(&mut w, 5, "tx", 60_000);
    assert_eq!(err, 0);
    let mut seq = 0;
    let mut written = Vec::new();
    let mut txn = |w: &mut World, written: &mut Vec<Written>, tag: &str, n: usize, commit| {
        assert_eq!(add_partitions(w, 5, "tx", pid, epoch, &[("c", 0)]), vec![0]);
        for i in 0..n {
            let key = format!("{tag}-{i:03}");
            let value = format!("{tag}-value-{}", "q".repeat(30));
            let offset = put_as(w, txn_producer(pid, epoch, seq), &key, Some(&value));
            seq += 1;
            if commit {
                written.push((offset, key, Some(value)));
            }
        }
        assert_eq!(end_txn(w, 5, "tx", pid, epoch, commit), Some(0));
        w.advance(10);
    };
    txn(&mut w, &mut written, "aborted", 5, false);
    for round in 0..6 {
        let passes = w.broker.cleaner_progress("c", 0).map_or(0, |p| p.passes);
        txn(&mut w, &mut written, &format!("c{round}"), 30, true);
        // Past the horizons of what the last pass kept, then a pass.
        w.advance(DELETE_RETENTION_MS + 1);
        clean(&mut w, passes + 1);
        let committed = read_all(&mut w, true);
        check_compacted(&committed, &written, 0);
        let data = committed.iter().filter(|s| !s.control).count();
        assert_eq!(data, written.len(), "round {round}: every committed record");
    }
    let raw = read_all(&mut w, false);
    assert!(
        raw.iter()
            .all(|s| !s.key.as_deref().is_some_and(|k| k.starts_with(b"aborted"))),
        "the aborted records went"
    );
    let abort_markers = raw
        .iter()
        .filter(|s| s.control && s.key.as_deref() == Some(b"\0\0\0\0"))
        .count();
    assert_eq!(abort_markers, 0, "the abort marker went after its horizon");
    w.restart(true);
    let committed = read_all(&mut w, true);
    assert_eq!(
        committed.iter().filter(|s| !s.control).count(),
        written.len()
    );
}

/// A compacted topic refuses a batch holding a record without a key, with
/// INVALID_RECORD, as Kafka's LogValidator does, compressed or not; a
/// topic that only deletes takes it.
#[test]
fn a_record_without_a_key_is_refused_by_a_compacted_topic() {
    let mut w = World::new(config());
    create_compacted(&mut w, "c");
    for codec in [Compression::None, Compression::Zstd] {
        let keyless = batch_with(&[b"no key".as_slice()], w.now_ms, codec);
        w.send(1, 9, &produce_req("c", 0, keyless, -1));
        let (err, _) = produce_answer(&mut w, 1).expect("produce answered");
        assert_eq!(err, 87, "INVALID_RECORD ({codec:?})");
    }
    assert_eq!(
        put(&mut w, "k", Some("v")),
        0,
        "nothing of the refused went in"
    );
    let (code, message) = create_with(&mut w, "d", &[("cleanup.policy", "delete")]);
    assert_eq!(code, 0, "{message:?}");
    let keyless = batch(&[b"no key".as_slice()], w.now_ms);
    w.send(1, 9, &produce_req("d", 0, keyless, -1));
    assert_eq!(produce_answer(&mut w, 1).expect("answered").0, 0);
}

/// The cleaner's first dirty offset is stored with the recovery checkpoint
/// (Kafka's cleaner-offset-checkpoint): after a clean stop or a power cut
/// the cleaner goes on from there instead of counting the whole log dirty.
#[test]
fn cleaner_progress_survives_restarts() {
    let mut w = World::new(config());
    create_compacted(&mut w, "c");
    let mut written = Vec::new();
    overwrite(&mut w, &mut written, 150, 0);
    // Passes until nothing is left to clean.
    clean(&mut w, 1);
    let mut first_dirty = 0;
    for _ in 0..20 {
        w.advance(2_000);
        let now = w
            .broker
            .cleaner_progress("c", 0)
            .unwrap()
            .first_dirty_offset;
        if now == first_dirty {
            break;
        }
        first_dirty = now;
    }
    assert!(first_dirty > 0);
    for power_cut in [false, true] {
        if power_cut {
            w.restart(true);
        } else {
            w.stop_and_restart();
        }
        let restored = w.broker.cleaner_progress("c", 0).expect("restored");
        assert_eq!(
            restored.first_dirty_offset, first_dirty,
            "power cut {power_cut}"
        );
        // Counting the whole log dirty again, it would make a pass now.
        w.advance(5_000);
        let progress = w.broker.cleaner_progress("c", 0).unwrap();
        assert_eq!(
            progress.passes, 0,
            "nothing was dirty (power cut {power_cut})"
        );
        check_compacted(&read_all(&mut w, false), &written, first_dirty);
    }
}
