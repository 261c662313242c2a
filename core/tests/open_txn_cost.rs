//! Issue 40: the cost of opening one more transaction does not grow with
//! the transactions already open. The bench's scale section times it
//! (InitProducerId + AddPartitionsToTxn + transactional Produce while N
//! are open); wall time on a shared machine moves with its load, so this
//! counts the work instead: the outputs each request makes the core emit
//! (meta.db writes, appends, syncs, responses) and the bytes of its meta.db
//! writes. A record written whole on every change (every open
//! transaction's state in one meta.db value, a partition's producer state
//! or open-transaction list stored with each append) makes them grow with
//! N; a scan in memory does not show here, only in time.

mod support;

use doze_core::BrokerConfig;
use support::requests::*;
use support::txn::*;
use support::*;

const TOPIC: &str = "t";
const PARTITIONS: i32 = 4;
/// Far longer than the test: the transactions stay open (the seed's rule
/// counts the timeout from the last state change).
const TIMEOUT_MS: i32 = 600_000;

/// The work of one request, from its frame to its answer, with the I/O it
/// waited for completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Work {
    outputs: u64,
    meta_bytes: u64,
}

fn counted(w: &mut World, request: impl FnOnce(&mut World)) -> Work {
    let (outputs, meta_bytes) = (w.outputs, w.meta_bytes);
    request(w);
    Work {
        outputs: w.outputs - outputs,
        meta_bytes: w.meta_bytes - meta_bytes,
    }
}

/// Opens transaction `id` (InitProducerId, AddPartitionsToTxn of one
/// partition, one transactional record there, acks=all, no EndTxn), as
/// the bench's `open-txns` items do; the work of each of the three requests.
fn open_one(w: &mut World, id: &str, partition: i32) -> [Work; 3] {
    let mut pid_epoch = (0, 0);
    let init = counted(w, |w| {
        let (err, pid, epoch) = init_txn(w, 1, id, TIMEOUT_MS);
        assert_eq!(err, 0, "InitProducerId of {id}");
        pid_epoch = (pid, epoch);
    });
    let (pid, epoch) = pid_epoch;
    let add = counted(w, |w| {
        let errors = add_partitions(w, 1, id, pid, epoch, &[(TOPIC, partition)]);
        assert_eq!(errors, vec![0], "AddPartitionsToTxn of {id}");
    });
    let produce = counted(w, |w| {
        let batch = txn_batch(&[b"x".as_slice()], pid, epoch, 0);
        w.send(1, 7, &produce_req(TOPIC, partition, batch, -1));
        let (err, _) = produce_answer(w, 1).expect("answered once durable");
        assert_eq!(err, 0, "transactional Produce of {id}");
    });
    [init, add, produce]
}

/// The least work of each request over a few more transactions: periodic
/// work that falls into one of them (a new producer-id block every
/// `PRODUCER_ID_BLOCK_SIZE` ids) is not the per-request cost.
fn one_more(w: &mut World, label: &str) -> [Work; 3] {
    let mut least = [Work {
        outputs: u64::MAX,
        meta_bytes: u64::MAX,
    }; 3];
    for k in 0..3 {
        let work = open_one(w, &format!("probe-{label}-{k}"), k % PARTITIONS);
        for (l, w) in least.iter_mut().zip(work) {
            *l = (*l).min(w);
        }
    }
    least
}

#[test]
fn one_more_open_transaction_costs_the_same_with_thousands_open() {
    // Checkpoints (every partition's producer state and open transactions,
    // written now and then) are left out: they are per bytes or per
    // interval, not per request.
    let mut w = World::new(BrokerConfig {
        checkpoint_bytes: u64::MAX,
        checkpoint_interval_ms: i64::MAX / 4,
        ..Default::default()
    });
    create_topic(&mut w, TOPIC, PARTITIONS);
    // A partition's first write also creates its segment files.
    for p in 0..PARTITIONS {
        open_one(&mut w, &format!("first-{p}"), p);
    }
    let few = one_more(&mut w, "few");
    // Those stay open too: 2,007 in all.
    for i in 0..2_000 {
        open_one(&mut w, &format!("open-{i}"), i % PARTITIONS);
    }
    let many = one_more(&mut w, "many");
    for (what, (f, m)) in ["InitProducerId", "AddPartitionsToTxn", "Produce"]
        .iter()
        .zip(few.iter().zip(many.iter()))
    {
        assert_eq!(
            f.outputs, m.outputs,
            "{what}: outputs with 4 open {f:?}, with 2,007 open {m:?}"
        );
        // The records name producer ids and times, whose digits may differ.
        assert!(
            m.meta_bytes <= f.meta_bytes + 16,
            "{what}: meta.db bytes with 4 open {f:?}, with 2,007 open {m:?}"
        );
    }
}
