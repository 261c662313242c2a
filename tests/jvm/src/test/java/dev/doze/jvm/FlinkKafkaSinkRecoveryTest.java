package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidTxnStateException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.protocol.Errors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * What Apache Flink's KafkaSink with DeliveryGuarantee.EXACTLY_ONCE asks of a
 * broker, done from Java as Flink does it but without Flink
 * ({@link FlinkStyleProducer} mirrors Flink's FlinkKafkaInternalProducer).
 *
 * <p>Flink writes each checkpoint's records in a transaction of its own
 * transactional id, pre-commits it (flush) at the checkpoint barrier, stores
 * (transactional id, producer id, epoch) in the checkpoint, and commits once the
 * checkpoint is complete. After a crash the restored job commits the stored
 * transactions again with a fresh producer that takes over the stored producer
 * id and epoch by reflection, without InitProducerId (which would abort the
 * transaction), and sends only FindCoordinator and EndTxn(COMMIT). Lingering
 * transactions of ids that no checkpoint covers are found by probing: Flink
 * calls InitProducerId on id after id until one answers epoch 0 (never used).
 *
 * <p>Expected answers, as Apache Kafka gives them with the classic transaction
 * protocol (transaction.version=1): a second EndTxn(COMMIT) of a committed
 * transaction with its epoch is NONE; EndTxn(COMMIT) of an aborted one is
 * INVALID_TXN_STATE (the client throws {@link InvalidTxnStateException}); an
 * epoch older than the coordinator's is PRODUCER_FENCED
 * ({@link ProducerFencedException}); and Flink's default transaction.timeout.ms
 * of one hour is above transaction.max.timeout.ms (15 minutes), so
 * InitProducerId answers INVALID_TRANSACTION_TIMEOUT, which kafka-clients 4.3.1
 * surfaces as a plain {@link KafkaException} ("Unexpected error in
 * InitProducerIdResponse; The transaction timeout is larger than the maximum
 * value allowed by the broker ..."), not as InvalidTxnTimeoutException: its
 * InitProducerIdHandler has no case for that error.
 *
 * <p>The tests use their broker only through its bootstrap address (and one
 * through a crash hook), so the same code can be pointed at a reference Apache
 * Kafka; here they run against doze.
 */
@ExtendWith(DozeExtension.class)
class FlinkKafkaSinkRecoveryTest {
    static final int PARTITIONS = 2;
    static final int RECORDS = 100;
    /** Below transaction.max.timeout.ms, and long enough that the broker never aborts a test's transaction. */
    static final int TXN_TIMEOUT_MS = 120_000;
    /** Flink's KafkaSink default transaction.timeout.ms (one hour). */
    static final int FLINK_DEFAULT_TXN_TIMEOUT_MS = 3_600_000;

    /**
     * Checkpoints 1..3 of subtask 0 used the ids prefix-0-1..3 (InitProducerId of a
     * new id: epoch 0; each gets its own producer id). A restored job probes from
     * checkpoint 1 as Flink's TransactionAborter does (initTransactions, look at the
     * epoch, close): the used ids answer epoch 1, and the first never-used one,
     * prefix-0-4, epoch 0, where probing stops.
     */
    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void probingFindsNeverUsedTransactionalIdsByEpochZero(DozeBroker broker) throws Exception {
        Sink sink = Sink.create(broker.bootstrap(), "flink-probe", 1);
        Set<Long> producerIds = new HashSet<>();
        for (int cp = 1; cp <= 3; cp++) {
            try (FlinkStyleProducer p = sink.producer(cp)) {
                p.initTransactions();
                assertEquals(0, p.epoch(), "InitProducerId of the never-seen id " + sink.transactionalId(cp));
                producerIds.add(p.producerId());
                p.beginTransaction();
                p.send(new ProducerRecord<>(sink.topic(), "k", "cp" + cp)).get(30, TimeUnit.SECONDS);
                p.commitTransaction();
            }
        }
        assertEquals(3, producerIds.size(), "three transactional ids, three producer ids: " + producerIds);

        List<String> probed = new ArrayList<>();
        int firstUnused = -1;
        for (int cp = 1; cp <= 10 && firstUnused < 0; cp++) {
            try (FlinkStyleProducer p = sink.producer(cp)) {
                p.initTransactions();
                probed.add(cp + ":" + p.producerId() + "/" + p.epoch());
                if (cp <= 3) {
                    assertTrue(producerIds.contains(p.producerId()), "probe of used id " + sink.transactionalId(cp)
                            + " got another producer id: " + probed);
                }
                if (p.epoch() == 0) {
                    firstUnused = cp;
                }
            }
        }
        System.out.println("flink probe: checkpoint:producerId/epoch " + probed);
        assertEquals(4, firstUnused, "probing stops at the first never-used id (epoch 0): " + probed);
        assertEquals(List.of("1", "1", "1", "0"), probed.stream().map(s -> s.substring(s.indexOf('/') + 1))
                .collect(Collectors.toList()), "epochs of the probed ids (used ones bumped once, new one 0)");
        assertEquals(List.of("cp1", "cp2", "cp3"), sink.values("read_committed"),
                "probing aborted or duplicated nothing");
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void recoveryCommitsPrecommittedTransactionWithoutInitProducerId(DozeBroker broker) throws Exception {
        resumeAndCommit(broker.bootstrap(), "no crash", () -> { });
    }

    @Test
    @Timeout(value = 90, unit = TimeUnit.SECONDS)
    void recoveryCommitsPrecommittedTransactionAfterBrokerSigkill(DozeBroker broker) throws Exception {
        resumeAndCommit(broker.bootstrap(), "broker SIGKILLed and restarted", broker::restartAfterKill9);
    }

    /**
     * A pre-committed transaction (records sent and flushed, producer id and
     * epoch stored, the producer abandoned as by a crash; optionally the
     * broker SIGKILLed and restarted too) is committed by a fresh producer that
     * resumes it from the stored id and epoch: its records become visible to
     * read_committed exactly once, the coordinator's producer id and epoch are
     * unchanged (no InitProducerId), and committing the same checkpoint again
     * (a second recovery) succeeds without changing anything.
     */
    static void resumeAndCommit(String bootstrap, String label, Runnable crash) throws Exception {
        Sink sink = Sink.create(bootstrap, "flink-out", PARTITIONS);
        List<String> sent = IntStream.range(0, RECORDS).mapToObj(i -> String.format("r%03d", i))
                .collect(Collectors.toList());

        FlinkStyleProducer writer = sink.producer(1);
        try {
            sink.precommit(writer, RECORDS, sent::get);
            long pid = writer.producerId();
            short epoch = writer.epoch();
            assertTrue(pid >= 0 && epoch >= 0, "producer id/epoch after initTransactions: " + pid + "/" + epoch);
            // The checkpoint holds (txnId, pid, epoch); then the task dies: the writer is never used again.
            assertEquals(List.of(), sink.values("read_committed"),
                    "records of the open transaction are visible to read_committed");
            assertEquals(RECORDS, sink.values("read_uncommitted").size(), "the pre-committed records are in the log");

            crash.run();

            TransactionDescription open = sink.describe(1);
            assertEquals(TransactionState.ONGOING, open.state(), "transaction before recovery (" + label + ")");
            assertEquals(pid, open.producerId(), "producer id before recovery (" + label + ")");
            assertEquals(epoch, open.producerEpoch(), "epoch before recovery (" + label + ")");
            assertEquals(Set.copyOf(Kafka.partitions(sink.topic(), PARTITIONS)), open.topicPartitions(),
                    "the transaction's partitions before recovery (" + label + ")");
            assertEquals(List.of(), sink.values("read_committed"),
                    "records visible before the recovery commit (" + label + ")");

            // Recovery: commit the checkpoint's transaction from the stored id and epoch.
            try (FlinkStyleProducer recovery = sink.producer(1)) {
                recovery.resumeTransaction(pid, epoch);
                recovery.commitTransaction();
                assertEquals(pid, recovery.producerId(), "producer id after the resumed commit");
                assertEquals(epoch, recovery.epoch(), "epoch after the resumed commit");
            }
            TransactionDescription done = sink.describe(1);
            assertEquals(TransactionState.COMPLETE_COMMIT, done.state(), "transaction after the resumed commit");
            assertEquals(pid, done.producerId(), "the coordinator's producer id changed: an InitProducerId was sent?");
            assertEquals(epoch, done.producerEpoch(), "the coordinator's epoch changed: an InitProducerId was sent?");
            assertEquals(sorted(sent), sorted(sink.values("read_committed")),
                    "read_committed after the resumed commit (" + label + ")");
            Map<TopicPartition, Long> hw = sink.ends("read_uncommitted");
            assertEquals(hw, sink.ends("read_committed"), "LSO after the commit");

            // A second recovery from the same checkpoint commits the same transaction again: NONE.
            try (FlinkStyleProducer again = sink.producer(1)) {
                again.resumeTransaction(pid, epoch);
                again.commitTransaction();
            }
            TransactionDescription after = sink.describe(1);
            assertEquals(TransactionState.COMPLETE_COMMIT, after.state(), "transaction after the repeated commit");
            assertEquals(epoch, after.producerEpoch(), "epoch after the repeated commit");
            assertEquals(sorted(sent), sorted(sink.values("read_committed")),
                    "read_committed after the repeated commit (" + label + ")");
            System.out.printf("flink resume (%s): producer %d epoch %d committed by a resumed producer, "
                    + "twice; high watermarks %s%n", label, pid, epoch, hw);
        } finally {
            writer.closeNow();
        }
    }

    /**
     * A transaction that was aborted (by its own producer: same epoch) cannot be
     * committed by resuming it: EndTxn(COMMIT) answers INVALID_TXN_STATE, and its
     * records stay invisible.
     */
    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void resumedCommitOfAbortedTransactionIsInvalidTxnState(DozeBroker broker) throws Exception {
        Sink sink = Sink.create(broker.bootstrap(), "flink-aborted", PARTITIONS);
        long pid;
        short epoch;
        try (FlinkStyleProducer writer = sink.producer(1)) {
            sink.precommit(writer, 10, i -> "a" + i);
            pid = writer.producerId();
            epoch = writer.epoch();
            writer.abortTransaction();
        }
        assertEquals(TransactionState.COMPLETE_ABORT, sink.describe(1).state(), "after abortTransaction");

        try (FlinkStyleProducer recovery = sink.producer(1)) {
            recovery.resumeTransaction(pid, epoch);
            KafkaException e = assertThrows(KafkaException.class, recovery::commitTransaction,
                    "a resumed commit of an aborted transaction succeeded");
            System.out.println("flink resume of an aborted transaction: commitTransaction threw " + e);
            assertEquals(InvalidTxnStateException.class, e.getClass(),
                    "the resumed commit of an aborted transaction failed, but not with INVALID_TXN_STATE: " + e);
            recovery.closeNow();
        }
        TransactionDescription d = sink.describe(1);
        assertEquals(TransactionState.COMPLETE_ABORT, d.state(), "after the refused commit");
        assertEquals(epoch, d.producerEpoch(), "epoch after the refused commit");
        assertEquals(List.of(), sink.values("read_committed"), "records of the aborted transaction became visible");
        assertEquals(10, sink.values("read_uncommitted").size(), "aborted records in the log");
    }

    /**
     * The stored epoch is stale (another producer with the transactional id ran
     * InitProducerId since, which aborted the open transaction and bumped the
     * epoch): the resumed commit answers PRODUCER_FENCED, the records stay
     * invisible, and the newer producer's transactions are unaffected.
     */
    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void resumedCommitWithStaleEpochIsFenced(DozeBroker broker) throws Exception {
        Sink sink = Sink.create(broker.bootstrap(), "flink-fenced", PARTITIONS);
        FlinkStyleProducer writer = sink.producer(1);
        try (FlinkStyleProducer newer = sink.producer(1)) {
            sink.precommit(writer, 10, i -> "stale" + i);
            long pid = writer.producerId();
            short epoch = writer.epoch();

            newer.initTransactions(); // aborts the open transaction, bumps the epoch
            assertEquals(pid, newer.producerId(), "InitProducerId of a known id keeps its producer id");
            assertTrue(newer.epoch() > epoch, "InitProducerId did not bump the epoch: " + epoch + " -> "
                    + newer.epoch());
            // Kafka: the open transaction is aborted (fencing epoch), then InitProducerId bumps again: Empty.
            TransactionDescription d = sink.describe(1);
            assertEquals(TransactionState.EMPTY, d.state(), "the transactional id after InitProducerId");
            assertEquals(newer.epoch(), d.producerEpoch(), "the coordinator's epoch after InitProducerId");

            try (FlinkStyleProducer recovery = sink.producer(1)) {
                recovery.resumeTransaction(pid, epoch);
                KafkaException e = assertThrows(KafkaException.class, recovery::commitTransaction,
                        "a resumed commit with a stale epoch succeeded");
                System.out.printf("flink resume with stale epoch %d (coordinator at %d): commitTransaction threw %s%n",
                        epoch, newer.epoch(), e);
                assertEquals(ProducerFencedException.class, e.getClass(),
                        "the stale resumed commit failed, but not as fenced: " + e);
                recovery.closeNow();
            }
            assertEquals(List.of(), sink.values("read_committed"), "records of the fenced transaction became visible");

            // The fencing producer is unaffected by the stale attempt.
            newer.beginTransaction();
            newer.send(new ProducerRecord<>(sink.topic(), 0, "k", "newer")).get(30, TimeUnit.SECONDS);
            newer.commitTransaction();
            assertEquals(List.of("newer"), sink.values("read_committed"),
                    "read_committed after the newer producer's commit");
        } finally {
            writer.closeNow();
        }
    }

    /**
     * Flink's default transaction.timeout.ms (1 h) exceeds transaction.max.timeout.ms
     * (15 min): InitProducerId answers INVALID_TRANSACTION_TIMEOUT; exactly 15 min is accepted.
     */
    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void flinkDefaultOneHourTransactionTimeoutIsRefused(DozeBroker broker) {
        Properties p = producerProps(broker.bootstrap());
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, Integer.toString(FLINK_DEFAULT_TXN_TIMEOUT_MS));
        try (FlinkStyleProducer producer = new FlinkStyleProducer(p, Kafka.unique("flink-sink") + "-0-1")) {
            KafkaException e = assertThrows(KafkaException.class, producer::initTransactions,
                    "InitProducerId with transaction.timeout.ms=" + FLINK_DEFAULT_TXN_TIMEOUT_MS + " succeeded");
            System.out.println("flink default transaction timeout: initTransactions threw " + e);
            // kafka-clients 4.3.1's InitProducerIdHandler has no case for INVALID_TRANSACTION_TIMEOUT: a
            // plain KafkaException with the error's message (not InvalidTxnTimeoutException).
            assertEquals(KafkaException.class, e.getClass(), "exception class for INVALID_TRANSACTION_TIMEOUT: " + e);
            assertEquals("Unexpected error in InitProducerIdResponse; " + Errors.INVALID_TRANSACTION_TIMEOUT.message(),
                    e.getMessage(), "the broker's error was not INVALID_TRANSACTION_TIMEOUT");
            producer.closeNow();
        }
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, Integer.toString(15 * 60 * 1000));
        try (FlinkStyleProducer producer = new FlinkStyleProducer(p, Kafka.unique("flink-sink") + "-0-1")) {
            producer.initTransactions();
            assertEquals(0, producer.epoch(), "transaction.timeout.ms = transaction.max.timeout.ms is accepted");
        }
    }

    // --- helpers (a bootstrap address, not a DozeBroker, so that any broker will do) -----------

    static Properties producerProps(String bootstrap) {
        Properties p = Kafka.producerProps(bootstrap);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, Integer.toString(TXN_TIMEOUT_MS));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    /**
     * A test's sink: its topic (created) and the transactional ids of its
     * subtask 0, {@code <prefix>-0-<checkpoint>} as Flink names them.
     */
    record Sink(String bootstrap, String topic, int partitions, String prefix) {
        static Sink create(String bootstrap, String topicPrefix, int partitions) throws Exception {
            Sink sink = new Sink(bootstrap, Kafka.unique(topicPrefix), partitions, Kafka.unique("flink-sink"));
            Kafka.createTopic(bootstrap, sink.topic, partitions);
            return sink;
        }

        String transactionalId(int checkpoint) {
            return prefix + "-0-" + checkpoint;
        }

        FlinkStyleProducer producer(int checkpoint) {
            return new FlinkStyleProducer(producerProps(bootstrap), transactionalId(checkpoint));
        }

        /**
         * A writer's checkpoint up to its pre-commit: initTransactions, a
         * transaction with n records (record i: partition i % partitions, key
         * k&lt;i&gt;, value(i)), flushed as at the checkpoint barrier.
         */
        void precommit(FlinkStyleProducer writer, int n, IntFunction<String> value) {
            writer.initTransactions();
            writer.beginTransaction();
            for (int i = 0; i < n; i++) {
                writer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, value.apply(i)));
            }
            writer.flush();
        }

        TransactionDescription describe(int checkpoint) throws Exception {
            String id = transactionalId(checkpoint);
            try (Admin a = Kafka.admin(bootstrap)) {
                return a.describeTransactions(List.of(id)).description(id).get(30, TimeUnit.SECONDS);
            }
        }

        Map<TopicPartition, Long> ends(String isolation) {
            return Kafka.endOffsets(bootstrap, topic, partitions, isolation);
        }

        /** Every value up to the end offsets (LSO for read_committed), partition by partition in offset order. */
        List<String> values(String isolation) {
            return Kafka.readValues(bootstrap, topic, partitions, isolation, Duration.ofSeconds(30)).values().stream()
                    .flatMap(List::stream).collect(Collectors.toList());
        }
    }

    static List<String> sorted(List<String> l) {
        return l.stream().sorted().collect(Collectors.toList());
    }
}
