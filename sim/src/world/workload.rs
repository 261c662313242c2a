//! The transactional part of the workload (transactional producers, zombie
//! pairs, the copier) and the verifiers that read the final logs back.

use rand::RngExt;

use super::{Role, World, GROUP_OUTPUT_TOPIC, OUTPUT_TOPIC, TOPIC, TXN_CHECK_INTERVAL_MS};
use crate::client::consumer::{Consumer, Isolation, Mode};
use crate::client::copier::{Copier, CopierConfig};
use crate::client::group_copier::{GroupCopier, GroupCopierConfig};
use crate::client::txn_producer::{TxnProducer, TxnProducerConfig};

/// Seeds each transactional producer's `restart_rng` apart from the run's
/// generator.
const RESTART_RNG_SALT: u64 = 0x0c1e_a4e2_0000_0002;

/// After its timeout and the check interval, a silent producer waits this
/// much more before it speaks again.
const SILENT_MARGIN_MS: std::ops::RangeInclusive<i64> = 100..=1000;
/// The verifier allows this on top of the longest timeout and the check
/// interval for open transactions to be aborted after the final restart.
const LSO_WAIT_MARGIN_MS: i64 = 2000;

impl World {
    pub(super) fn start_transactional_clients(&mut self) {
        let s = self.cfg.scenario.clone();
        let producers = self.draw_count(s.txn_producers);
        let zombies = self.draw_count(s.zombies);
        for i in 0..producers + 2 * zombies {
            let pair = i.checked_sub(producers).map(|z| z / 2);
            let transactional_id = match pair {
                None => format!("sim-txn-{i}"),
                Some(z) => format!("sim-zombie-{z}"),
            };
            // The first of a pair starts at once and becomes the zombie; the
            // second takes the id over a little later.
            let zombie = pair.is_some() && (i - producers).is_multiple_of(2);
            let usurper = pair.is_some() && !zombie;
            let client = self.slots.len() as u32;
            let cfg = self.txn_config(client, transactional_id, zombie);
            self.history.idempotent.insert(client);
            let producer = TxnProducer::new(client, cfg, &mut self.rng);
            let delay_ms = if usurper {
                s.usurper_at.draw(&mut self.rng)
            } else {
                self.rng.random_range(0..=10)
            };
            self.add_client(Box::new(producer), Role::Producer, delay_ms);
        }
        if self.draw_count(s.copiers) > 0 && !self.main_topic_thins() {
            let cfg = CopierConfig {
                input: TOPIC.into(),
                input_partitions: self.topic_partitions,
                output: OUTPUT_TOPIC.into(),
                output_partitions: self.topic_partitions,
                transactional_id: "sim-copier".into(),
                group: "sim-copier-group".into(),
                timeout_ms: s.txn_timeout_ms.draw(&mut self.rng) as i32,
                crash_p: s.copier_crash_percent as f64 / 100.0,
                abort_p: s.abort_percent as f64 / 200.0,
            };
            self.history.copier_output = Some(OUTPUT_TOPIC.into());
            let client = self.slots.len() as u32;
            self.add_client(Box::new(Copier::new(client, cfg)), Role::Copier, 5);
        }
        self.start_group_copiers();
    }

    /// Members of one consumer group copying the main topic: some start
    /// now, some join later (each join is a rebalance, often in the middle
    /// of the others' transactions).
    fn start_group_copiers(&mut self) {
        let s = self.cfg.scenario.clone();
        if self.rng.random_range(0..100) >= s.group_percent || self.main_topic_thins() {
            return;
        }
        let first = self.draw_count(s.group_copiers);
        let joiners = self.draw_count(s.group_joiners);
        if first == 0 {
            return;
        }
        self.history.group_output = Some(GROUP_OUTPUT_TOPIC.into());
        for i in 0..first + joiners {
            let cfg = GroupCopierConfig {
                input: TOPIC.into(),
                output: GROUP_OUTPUT_TOPIC.into(),
                partitions: self.topic_partitions,
                transactional_id: format!("sim-group-copier-{i}"),
                group: "sim-group".into(),
                txn_timeout_ms: s.txn_timeout_ms.draw(&mut self.rng) as i32,
                session_timeout_ms: s.group_session_ms.draw(&mut self.rng) as i32,
                crash_p: s.group_crash_percent as f64 / 100.0,
                crashes_max: s.group_crashes_max as u32,
                abort_p: s.abort_percent as f64 / 200.0,
            };
            let delay_ms = if i < first {
                self.rng.random_range(0..=50)
            } else {
                s.group_join_at.draw(&mut self.rng)
            };
            let client = self.slots.len() as u32;
            let member = GroupCopier::new(client, cfg);
            self.add_client(Box::new(member), Role::Copier, delay_ms);
        }
    }

    fn txn_config(
        &mut self,
        client: u32,
        transactional_id: String,
        zombie: bool,
    ) -> TxnProducerConfig {
        let s = &self.cfg.scenario;
        let timeout_ms = s.txn_timeout_ms.draw(&mut self.rng);
        let transactions = s.transactions.draw(&mut self.rng);
        let dead_at_end = !zombie && self.rng.random_range(0..100) < s.dead_percent;
        TxnProducerConfig {
            topic: TOPIC.into(),
            partitions: self.topic_partitions,
            transactional_id,
            // A zombie runs long enough to be open when it is taken over.
            transactions: if zombie {
                transactions * 10
            } else {
                transactions
            },
            timeout_ms: timeout_ms as i32,
            abort_p: s.abort_percent as f64 / 100.0,
            silent_p: s.silent_percent as f64 / 100.0,
            silent_ms: timeout_ms + TXN_CHECK_INTERVAL_MS + self.rng.random_range(SILENT_MARGIN_MS),
            dead_at_end,
            zombie,
            keyed: self.compacted,
            restart_seed: self.cfg.seed ^ RESTART_RNG_SALT ^ u64::from(client),
        }
    }

    /// After the final restart: one verifier per topic, each waiting for
    /// the open transactions left by dead producers to be aborted.
    pub(super) fn start_verifiers(&mut self) {
        let lso_wait_ms =
            self.cfg.scenario.txn_timeout_ms.max_ms + TXN_CHECK_INTERVAL_MS + LSO_WAIT_MARGIN_MS;
        let mut topics = vec![TOPIC];
        if self.history.copier_output.is_some() {
            topics.push(OUTPUT_TOPIC);
        }
        if self.history.group_output.is_some() {
            topics.push(GROUP_OUTPUT_TOPIC);
        }
        self.history.final_reads_pending = topics.len() as u32;
        for topic in topics {
            let client = self.slots.len() as u32;
            let mut verifier = Consumer::new(
                client,
                topic.into(),
                self.topic_partitions,
                Mode::ReadToEnd,
                Isolation::ReadUncommitted,
                &mut self.rng,
            )
            .with_lso_wait(lso_wait_ms);
            if topic != TOPIC {
                verifier = verifier.not_main();
            }
            self.add_client(Box::new(verifier), Role::Verifier, 600);
        }
    }
}
