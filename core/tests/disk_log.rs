//! The log on disk, through the broker: what a start-up reads (clean stop,
//! crash, power cut, lost index files), fetches served as file ranges and
//! byte-identical after restarts, read_committed across many segments,
//! ListOffsets by timestamp, read errors, and memory that does not grow with
//! the retained bytes.

mod support;

use bytes::Bytes;
use doze_core::{BrokerConfig, PartitionDir, SegmentFile};
use kafka_protocol::messages::*;
use support::requests::*;
use support::txn::*;
use support::*;

fn small_segments() -> BrokerConfig {
    BrokerConfig {
        segment_bytes: 2048,
        ..Default::default()
    }
}

/// Produces `n` records of 100 bytes to t-0 (one batch each); returns the
/// batches as stored (offsets assigned), in order.
fn produce_n(w: &mut World, n: usize) {
    for i in 0..n {
        let value = vec![(i % 251) as u8; 100];
        w.send(
            1,
            9,
            &produce_req("t", 0, batch(&[&value], T0_MS + i as i64), -1),
        );
        assert_eq!(produce_answer(w, 1).map(|a| a.0), Some(0));
    }
}

/// Reads t-0 from `offset` to the end with fetches of `max_bytes`.
fn read_all(w: &mut World, mut offset: i64, max_bytes: i32) -> Vec<(i64, Bytes)> {
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let mut req = fetch_req("t", 0, offset, 0, 1);
        req.topics[0].partitions[0].partition_max_bytes = max_bytes;
        req.max_bytes = max_bytes;
        w.send(2, 12, &req);
        let p = fetch_answer(w, 2).expect("fetch answered");
        assert_eq!(p.error_code, 0, "fetch at {offset}");
        let got: Vec<_> = decode_values(p.records.unwrap_or_default())
            .into_iter()
            .filter(|(o, _)| *o >= offset)
            .collect();
        let Some(last) = got.last() else {
            assert_eq!(offset, p.high_watermark, "an empty answer only at the end");
            return out;
        };
        offset = last.0 + 1;
        out.extend(got);
    }
    panic!("read_all did not end");
}

fn log_reads(w: &World) -> Vec<&doze_core::FileRange> {
    w.reads_log
        .iter()
        .filter(|r| r.file == SegmentFile::Log)
        .collect()
}

#[test]
fn a_fetch_sends_file_ranges_and_reads_back_every_offset_after_restarts() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    produce_n(&mut w, 300);
    let segments = w.broker.partition("t", 0).unwrap().segments().count();
    assert!(segments >= 10, "small segments: {segments}");
    let expect = read_all(&mut w, 0, 1 << 20);
    assert_eq!(expect.len(), 300);
    for (i, (offset, value)) in expect.iter().enumerate() {
        assert_eq!(
            (*offset, value.as_ref()),
            (i as i64, &vec![(i % 251) as u8; 100][..])
        );
    }
    // Tiny fetches: every batch found through the index and header reads.
    assert_eq!(read_all(&mut w, 0, 150), expect);
    w.stop_and_restart();
    assert_eq!(read_all(&mut w, 0, 700), expect);
    w.restart(false);
    assert_eq!(read_all(&mut w, 0, 1 << 20), expect);
    w.restart(true);
    assert_eq!(read_all(&mut w, 0, 333), expect);
}

#[test]
fn a_clean_restart_reads_no_log_bytes_and_a_crash_only_what_lies_above_the_checkpoint() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    produce_n(&mut w, 200);
    w.input(doze_core::Input::Shutdown);
    assert!(w.stopped);
    w.reads_log.clear();
    w.restart(false);
    assert_eq!(
        log_reads(&w),
        Vec::<&doze_core::FileRange>::new(),
        "a clean start reads only indexes"
    );
    // Ten more records, then a crash: only the bytes past the checkpoint are read.
    let ckpt_end = w.broker.partition("t", 0).unwrap().end_position();
    produce_n(&mut w, 10);
    w.reads_log.clear();
    w.restart(false);
    let reads = log_reads(&w);
    assert!(!reads.is_empty(), "the tail above the checkpoint is read");
    for r in reads {
        assert!(
            (r.segment_base, r.position) >= (ckpt_end.segment_base, ckpt_end.position),
            "read {r:?} lies below the recovery point {ckpt_end:?}"
        );
    }
    assert_eq!(w.broker.partition("t", 0).unwrap().log_end_offset(), 210);
    assert_eq!(read_all(&mut w, 0, 1 << 20).len(), 210);
}

#[test]
fn lost_index_files_are_rebuilt_from_the_batch_headers() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    produce_n(&mut w, 150);
    w.stop_and_restart();
    let before: Vec<_> = w
        .files()
        .into_iter()
        .map(|(key, f)| (key, f.data.clone()))
        .collect();
    let expect = read_all(&mut w, 0, 1 << 20);
    w.input(doze_core::Input::Shutdown);
    w.remove_files(|(_, _, kind)| *kind != SegmentFile::Log);
    w.reads_log.clear();
    w.restart(false);
    assert!(!log_reads(&w).is_empty(), "without indexes the log is read");
    for (key, data) in &before {
        let files = w.files();
        let now = files.get(key).unwrap_or_else(|| panic!("{key:?} rebuilt"));
        assert_eq!(&now.data, data, "{key:?} is rebuilt byte for byte");
    }
    assert_eq!(read_all(&mut w, 0, 500), expect);
}

/// Runs `count` transactions of 3 records on t-0 as `tx` (every third one
/// aborted, the first included); returns the values committed, in order.
fn run_txns(
    w: &mut World,
    pid: i64,
    epoch: i16,
    seq: &mut i32,
    first: usize,
    count: usize,
) -> Vec<Vec<u8>> {
    let mut committed = Vec::new();
    for n in first..first + count {
        assert_eq!(add_partitions(w, 1, "tx", pid, epoch, &[("t", 0)]), vec![0]);
        let values: Vec<Vec<u8>> = (0..3).map(|i| vec![n as u8; 200 + i]).collect();
        let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        w.send(
            1,
            9,
            &produce_req("t", 0, txn_batch(&refs, pid, epoch, *seq), -1),
        );
        assert_eq!(produce_answer(w, 1).unwrap().0, 0);
        *seq += 3;
        let commit = n % 3 != 0;
        assert_eq!(end_txn(w, 1, "tx", pid, epoch, commit), Some(0));
        if commit {
            committed.extend(values);
        }
    }
    committed
}

/// The `.txnindex` entries on t-0's files (what a reader sees).
fn aborted_entries(w: &World) -> usize {
    w.files()
        .iter()
        .filter(|((_, _, kind), _)| *kind == SegmentFile::TxnIndex)
        .map(|(_, f)| f.data.len() / 34)
        .sum()
}

/// Reads t-0 read_committed from the start, dropping what a client drops.
fn read_committed(w: &mut World) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        w.send(7, 12, &fetch_isolated("t", 0, offset, true));
        let p = fetch_answer(w, 7).unwrap();
        assert_eq!(p.error_code, 0);
        let aborted: Vec<i64> = p
            .aborted_transactions
            .unwrap_or_default()
            .iter()
            .map(|a| a.first_offset)
            .collect();
        let records = whole_batches(&p.records.unwrap_or_default());
        if records.is_empty() {
            return out;
        }
        let mut buf = records.clone();
        let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut buf).unwrap();
        // A client drops the data of aborted transactions: from an aborted
        // first offset up to its marker, the producer's records are skipped.
        let mut skipping = false;
        for set in sets {
            let end = set.records.last().map(|r| r.offset + 1);
            for r in set.records {
                if r.offset < offset {
                    continue;
                }
                if r.control {
                    skipping = false;
                    continue;
                }
                if aborted.contains(&r.offset) {
                    skipping = true;
                }
                if !skipping {
                    out.push(r.value.clone().unwrap().to_vec());
                }
                offset = r.offset + 1;
            }
            offset = offset.max(end.unwrap_or(offset));
        }
    }
}

#[test]
fn read_committed_across_segments_survives_restarts_and_a_lost_txnindex() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    let (err, pid, epoch) = init_txn(&mut w, 1, "tx", 600_000);
    assert_eq!(err, 0);
    let committed = run_txns(&mut w, pid, epoch, &mut 0, 0, 30);
    assert_eq!(aborted_entries(&w), 10, "one .txnindex entry per abort");
    assert_eq!(read_committed(&mut w), committed);
    w.stop_and_restart();
    assert_eq!(read_committed(&mut w), committed);
    w.input(doze_core::Input::Shutdown);
    w.remove_files(|(_, _, kind)| *kind == SegmentFile::TxnIndex);
    w.restart(false);
    assert_eq!(aborted_entries(&w), 10, "the .txnindex files are rebuilt");
    assert_eq!(read_committed(&mut w), committed);
    w.restart(true);
    assert_eq!(read_committed(&mut w), committed);
}

/// Index bytes of t-0's live files that a power cut would take.
fn unsynced_index_bytes(w: &World) -> usize {
    w.files()
        .iter()
        .filter(|((_, _, kind), _)| *kind != SegmentFile::Log)
        .map(|(_, f)| f.data.len() - f.synced_len)
        .sum()
}

fn unsynced_log_bytes(w: &World) -> usize {
    w.files()
        .iter()
        .filter(|((_, _, kind), _)| *kind == SegmentFile::Log)
        .map(|(_, f)| f.data.len() - f.synced_len)
        .sum()
}

/// Transactions, a checkpoint on the timer, more transactions, a power
/// cut: what read_committed reads afterwards, and whether the start-up read
/// only above the checkpoint.
fn checkpoint_then_power_cut(config: BrokerConfig) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, bool) {
    let mut w = World::new(config);
    create_topic(&mut w, "t", 1);
    let (err, pid, epoch) = init_txn(&mut w, 1, "tx", 600_000);
    assert_eq!(err, 0);
    let mut seq = 0;
    let mut committed = run_txns(&mut w, pid, epoch, &mut seq, 0, 24);
    // Answered writes are on disk; their index entries need not be.
    assert_eq!(unsynced_log_bytes(&w), 0, "every answered batch is synced");
    assert!(
        unsynced_index_bytes(&w) > 0,
        "syncs for acknowledged writes leave index appends unsynced"
    );
    // The checkpoint timer.
    w.advance(doze_core::limits::CHECKPOINT_INTERVAL_MS);
    assert!(
        w.meta.keys().any(|k| k.starts_with(b"ckpt/")),
        "a checkpoint is written on the timer"
    );
    let synced_at_checkpoint = unsynced_index_bytes(&w) == 0;
    let recovery_point = w.broker.partition("t", 0).unwrap().end_position();
    committed.extend(run_txns(&mut w, pid, epoch, &mut seq, 24, 24));
    w.reads_log.clear();
    w.restart(true);
    let above = log_reads(&w).iter().all(|r| {
        (r.segment_base, r.position) >= (recovery_point.segment_base, recovery_point.position)
    });
    (
        read_committed(&mut w),
        committed,
        synced_at_checkpoint && above,
    )
}

#[test]
fn a_checkpoint_waits_for_the_index_entries_below_it_and_a_power_cut_loses_only_those_above() {
    let (read, committed, from_checkpoint) = checkpoint_then_power_cut(small_segments());
    assert!(
        from_checkpoint,
        "the index files were synced before the checkpoint, and the start read only above it"
    );
    assert_eq!(read, committed, "read_committed after the power cut");
    // The planted bug writes the checkpoint without that sync: the power cut
    // takes `.txnindex` entries it vouched for, and aborted records are read.
    let planted = BrokerConfig {
        planted_bug: Some(doze_core::PlantedBug::CheckpointBeforeIndexesDurable),
        ..small_segments()
    };
    let (read, committed, _) = checkpoint_then_power_cut(planted);
    assert_ne!(read, committed, "the planted bug is caught");
}

#[test]
fn an_open_transaction_holds_the_lso_across_a_clean_restart() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    produce_n(&mut w, 20);
    let (_, pid, epoch) = init_txn(&mut w, 1, "tx", 600_000);
    add_partitions(&mut w, 1, "tx", pid, epoch, &[("t", 0)]);
    w.send(
        1,
        9,
        &produce_req("t", 0, txn_batch(&[b"open"], pid, epoch, 0), -1),
    );
    assert_eq!(produce_answer(&mut w, 1).unwrap().0, 0);
    produce_n(&mut w, 40);
    assert_eq!(latest_offset(&mut w, 3, "t", 0, true), 20);
    w.stop_and_restart();
    assert_eq!(
        latest_offset(&mut w, 3, "t", 0, true),
        20,
        "LSO from the checkpoint"
    );
    w.restart(false);
    assert_eq!(latest_offset(&mut w, 3, "t", 0, true), 20);
    assert_eq!(end_txn(&mut w, 1, "tx", pid, epoch, true), Some(0));
    assert_eq!(latest_offset(&mut w, 3, "t", 0, true), 62);
}

#[test]
fn list_offsets_by_timestamp_across_segments_after_a_restart() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    for i in 0..100i64 {
        let ts = T0_MS + i * 1000;
        w.send(1, 9, &produce_req("t", 0, batch(&[b"a", b"b"], ts), -1));
        produce_answer(&mut w, 1).unwrap();
    }
    w.stop_and_restart();
    let by_time = |w: &mut World, ts: i64| -> (i64, i64) {
        use kafka_protocol::messages::list_offsets_request::{
            ListOffsetsPartition, ListOffsetsTopic,
        };
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("t"))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(ts)])]);
        w.send(4, 7, &req);
        match w.recv(4) {
            Some((_, ResponseKind::ListOffsets(r))) => {
                let p = &r.topics[0].partitions[0];
                assert_eq!(p.error_code, 0);
                (p.offset, p.timestamp)
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(by_time(&mut w, 0), (0, T0_MS));
    assert_eq!(by_time(&mut w, T0_MS + 37_000), (74, T0_MS + 37_000));
    assert_eq!(by_time(&mut w, T0_MS + 37_001), (76, T0_MS + 38_000));
    assert_eq!(by_time(&mut w, T0_MS + 99_000), (198, T0_MS + 99_000));
    assert_eq!(by_time(&mut w, T0_MS + 99_001), (-1, -1));
    assert_eq!(by_time(&mut w, -3), (198, T0_MS + 99_000), "MAX_TIMESTAMP");
}

#[test]
fn a_failed_read_answers_storage_error_and_takes_only_that_partition_offline() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 2);
    // More batches than the log remembers positions of: offset 0 needs a read.
    produce_n(&mut w, 400);
    w.send(1, 9, &produce_req("t", 1, batch(&[b"other"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1).unwrap().0, 0);
    w.fail_reads = 1;
    w.send(2, 12, &fetch_req("t", 0, 0, 0, 1));
    assert_eq!(
        fetch_answer(&mut w, 2).unwrap().error_code,
        56,
        "KAFKA_STORAGE_ERROR"
    );
    w.send(2, 12, &fetch_req("t", 0, 399, 0, 1));
    assert_eq!(
        fetch_answer(&mut w, 2).unwrap().error_code,
        56,
        "offline until restart"
    );
    w.send(1, 9, &produce_req("t", 0, batch(&[b"x"], T0_MS), -1));
    assert_eq!(produce_answer(&mut w, 1).unwrap().0, 56);
    w.send(2, 12, &fetch_req("t", 1, 0, 0, 1));
    let p = fetch_answer(&mut w, 2).unwrap();
    assert_eq!(
        (p.error_code, decode_values(p.records.unwrap()).len()),
        (0, 1)
    );
    w.restart(false);
    w.send(2, 12, &fetch_req("t", 0, 0, 0, 1));
    assert_eq!(
        fetch_answer(&mut w, 2).unwrap().error_code,
        0,
        "back after a restart"
    );
}

#[test]
fn a_response_whose_file_is_gone_closes_the_connection() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    produce_n(&mut w, 100);
    let dir = PartitionDir::new("t", 0);
    w.remove_files(|key| *key == (dir.clone(), 0, SegmentFile::Log));
    w.send(2, 12, &fetch_req("t", 0, 0, 0, 1));
    assert!(
        w.closed.contains(&2),
        "the connection is closed, not left hanging"
    );
    w.send(3, 12, &fetch_req("t", 0, 99, 0, 1));
    assert_eq!(fetch_answer(&mut w, 3).unwrap().error_code, 56);
}

#[test]
fn requests_during_recovery_wait_for_it_and_a_power_cut_during_recovery_loses_nothing() {
    let mut w = World::new(small_segments());
    create_topic(&mut w, "t", 1);
    produce_n(&mut w, 100);
    w.auto_io = false;
    w.restart(false);
    assert!(
        !w.pending_reads.is_empty(),
        "recovery reads the log above the checkpoint"
    );
    w.send(2, 12, &fetch_req("t", 0, 0, 0, 1));
    assert!(w.recv(2).is_none(), "requests wait for the recovery");
    // Power goes during the recovery.
    w.restart(true);
    w.auto_io = true;
    w.drain();
    assert_eq!(read_all(&mut w, 0, 1 << 20).len(), 100);
}

#[test]
fn memory_holds_sparse_indexes_not_batches() {
    let mut w = World::new(BrokerConfig {
        segment_bytes: 64 * 1024,
        ..Default::default()
    });
    create_topic(&mut w, "t", 1);
    produce_n(&mut w, 5_000);
    let log = w.broker.partition("t", 0).unwrap();
    let bytes = log.size_bytes();
    let entries = log.memory_entries();
    // Two index entries (offset + time) per 4 KiB, plus the known-batch cache.
    let bound =
        2 * (bytes as usize / 4096 + log.segments().count()) + doze_core::limits::KNOWN_BATCHES_MAX;
    assert!(
        entries <= bound,
        "{entries} entries for {bytes} bytes (bound {bound})"
    );
    assert!(entries < 5_000 / 4, "fewer entries than batches: {entries}");
}
