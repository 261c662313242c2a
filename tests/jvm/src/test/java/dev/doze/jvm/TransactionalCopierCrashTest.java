package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Exactly-once read-process-write with the Java client's transactions.
 *
 * <p>{@link #copierSurvivesBrokerAndCopierSigkills}: a copier JVM
 * ({@link CopierMain}) moves pre-filled records from IN to OUT while the test
 * SIGKILLs the broker twice and the copier twice (a new copier JVM with the
 * same transactional.id takes over, aborting the dead one's open transaction).
 * At the end read_committed OUT holds each input record exactly once, each
 * partition in input order, and the group's committed offsets are IN's ends.
 *
 * <p>{@link #abandonedCopierIsFencedByNewInstance}: an in-JVM copier leaves a
 * transaction open (records and offsets sent) and is abandoned without close;
 * a new instance with the same transactional.id fences it and copies
 * everything; the old instance's commit then fails as fenced.
 */
@ExtendWith(DozeExtension.class)
@BrokerSettings({"transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
        "group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000"})
class TransactionalCopierCrashTest {
    static final int PARTITIONS = 2;
    static final int RECORDS = 4_000;
    /** IN's keys k0..k6, spread over the partitions by the default partitioner. */
    static final int KEYS = 7;
    /** Records/s the copier sends: ~8 s of copying, so every kill point is reached while it works. */
    static final int RATE = 500;
    static final Duration RUN_BUDGET = Duration.ofSeconds(120);
    static final int MAX_UNPLANNED_EXITS = 6;

    @Test
    @Timeout(value = 200, unit = TimeUnit.SECONDS)
    void copierSurvivesBrokerAndCopierSigkills(DozeBroker broker) throws Exception {
        Names names = Names.create(broker, "eos");
        Map<Integer, List<String>> inByPart = Kafka.prefill(broker, names.in(), PARTITIONS, RECORDS, KEYS);

        Copier copier = new Copier(broker, List.of(broker.bootstrap(), names.in(), names.out(), names.group(),
                names.txnId(), Integer.toString(RATE), Integer.toString(RECORDS), Integer.toString(PARTITIONS)));
        // Broker and copier alternately, at these records committed.
        KillSchedule schedule = new KillSchedule(broker, copier, RUN_BUDGET, MAX_UNPLANNED_EXITS, List.of(
                KillSchedule.broker(RECORDS * 15 / 100),
                KillSchedule.child(RECORDS * 35 / 100),
                KillSchedule.broker(RECORDS * 55 / 100),
                KillSchedule.child(RECORDS * 75 / 100)));
        long t0 = System.nanoTime();
        try {
            schedule.run(copier);
            assertTrue(copier.waitFor(Duration.ofSeconds(30)), "copier printed DONE but did not exit");
            assertEquals(0, copier.exitValue(), "copier exit status after DONE\n" + copier.logTail(40));
        } finally {
            copier.kill9();
        }
        System.out.printf("events %s; unplanned copier exits %s; %d copier JVMs; %.1fs%n", schedule.events,
                schedule.unplanned, copier.runs(), (System.nanoTime() - t0) / 1e9);

        // No transaction is left open on OUT (the last copier's last one committed).
        Map<TopicPartition, Long> hw = Kafka.endOffsets(broker, names.out(), PARTITIONS, "read_uncommitted");
        Map<TopicPartition, Long> lso = Kafka.endOffsets(broker, names.out(), PARTITIONS, "read_committed");
        assertEquals(hw, lso, "OUT: last stable offsets differ from the high watermarks after the copier finished");
        checkExactlyOnce(broker, names, inByPart, "events " + schedule.events + ", unplanned exits "
                + schedule.unplanned);
        checkCommitted(broker, names);
    }

    @Test
    @Timeout(value = 90, unit = TimeUnit.SECONDS)
    void abandonedCopierIsFencedByNewInstance(DozeBroker broker) throws Exception {
        Names names = Names.create(broker, "zombie");
        int n = 200;
        Map<Integer, List<String>> inByPart = Kafka.prefill(broker, names.in(), PARTITIONS, n, KEYS);

        // Instance A: one transaction with some records and its offsets, then abandoned.
        KafkaProducer<String, String> zombie = new KafkaProducer<>(txnProducerProps(broker, names));
        zombie.initTransactions();
        int zombieSent;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(groupConsumerProps(broker, names))) {
            c.subscribe(List.of(names.in()));
            ConsumerRecords<String, String> recs = pollSome(c, Duration.ofSeconds(30));
            zombie.beginTransaction();
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (ConsumerRecord<String, String> r : recs) {
                zombie.send(new ProducerRecord<>(names.out(), r.partition(), r.key(), r.value()))
                        .get(30, TimeUnit.SECONDS);
                offsets.put(new TopicPartition(names.in(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
            }
            zombie.sendOffsetsToTransaction(offsets, c.groupMetadata());
            zombieSent = recs.count();
            // Its consumer is gone (left the group); its producer lives on, transaction open.
        }
        Map<TopicPartition, Long> hwWithZombie = Kafka.endOffsets(broker, names.out(), PARTITIONS, "read_uncommitted");
        assertEquals(zombieSent, hwWithZombie.values().stream().mapToLong(Long::longValue).sum(),
                "the abandoned transaction's records are in OUT's log");

        // Instance B, same transactional.id: fences A (aborting its transaction) and copies everything.
        try (KafkaProducer<String, String> p = new KafkaProducer<>(txnProducerProps(broker, names));
             KafkaConsumer<String, String> c = new KafkaConsumer<>(groupConsumerProps(broker, names))) {
            p.initTransactions();
            c.subscribe(List.of(names.in()));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(45);
            int copied = 0;
            while (copied < n) {
                assertTrue(System.nanoTime() < deadline, "new instance copied only " + copied + " of " + n);
                ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(200));
                if (recs.isEmpty()) {
                    continue;
                }
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : recs) {
                    p.send(new ProducerRecord<>(names.out(), r.partition(), r.key(), r.value()));
                    offsets.put(new TopicPartition(names.in(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                p.commitTransaction();
                copied += recs.count();
            }
            assertEquals(n, copied, "the new instance started from offset 0 (A's offsets were never committed)");
        }

        // A wakes up and tries to finish its transaction: fenced.
        KafkaException e = assertThrows(KafkaException.class, zombie::commitTransaction,
                "the abandoned instance committed after a new instance with its transactional.id started");
        assertTrue(e instanceof ProducerFencedException || e instanceof InvalidProducerEpochException,
                "the zombie's commit failed, but not as fenced: " + e);
        System.out.println("zombie commitTransaction: " + e);
        zombie.close(Duration.ZERO);

        checkExactlyOnce(broker, names, inByPart, "zombie sent " + zombieSent);
        checkCommitted(broker, names);
    }

    // --- helpers -------------------------------------------------------------------------------

    /** A test's unique names: IN and OUT (created, PARTITIONS each), the group, the transactional.id. */
    record Names(String in, String out, String group, String txnId) {
        static Names create(DozeBroker broker, String prefix) throws Exception {
            Names names = new Names(Kafka.unique(prefix + "-in"), Kafka.unique(prefix + "-out"),
                    Kafka.unique(prefix + "-group"), Kafka.unique(prefix + "-copier"));
            Kafka.createTopic(broker, names.in, PARTITIONS);
            Kafka.createTopic(broker, names.out, PARTITIONS);
            return names;
        }
    }

    /** read_committed OUT holds every input value once, each partition in input order. */
    static void checkExactlyOnce(DozeBroker broker, Names names, Map<Integer, List<String>> inByPart, String ctx) {
        Kafka.assertExactlyOnce(Kafka.readValues(broker, names.out(), PARTITIONS, "read_committed",
                Duration.ofSeconds(60)), inByPart, ctx);
    }

    /** The group's committed offsets are IN's end offsets. */
    static void checkCommitted(DozeBroker broker, Names names) throws Exception {
        assertEquals(Kafka.endOffsets(broker, names.in(), PARTITIONS, "read_committed"),
                Kafka.groupOffsets(broker, names.group()),
                "group " + names.group() + " committed offsets vs IN's end offsets");
    }

    /** The in-JVM copiers' producer: CopierMain's without the settings for riding out broker restarts. */
    static Properties txnProducerProps(DozeBroker broker, Names names) {
        return Kafka.transactionalProducerProps(broker.bootstrap(), names.txnId());
    }

    static Properties groupConsumerProps(DozeBroker broker, Names names) {
        Properties cp = Kafka.groupConsumerProps(broker.bootstrap(), names.group());
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "40");
        return cp;
    }

    static ConsumerRecords<String, String> pollSome(KafkaConsumer<String, String> c, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(200));
            if (!recs.isEmpty()) {
                return recs;
            }
        }
        throw new AssertionError("no record polled within " + timeout);
    }

    /**
     * The copier JVMs ({@link CopierMain}) and the job's progress as they print
     * it: {@code COMMITTED <sum of committed offsets> <partitions>} after each
     * commit, {@code DONE <sum>} at the end. Failure messages show the last three
     * copiers' stderr (the client's slf4j log is in copier-N.log).
     */
    static final class Copier extends ChildJvm implements KillSchedule.Job {
        /** The highest sum of committed offsets that any copier printed. */
        volatile long progress;
        /** The current copier printed DONE. */
        volatile boolean done;
        /** COMMITTED (and DONE) lines of the current copier. */
        volatile int commits;

        Copier(DozeBroker broker, List<String> args) {
            super(broker.logDir(), "copier", CopierMain.class, args);
        }

        /** Synchronized with {@link #onStdout}: a late line of the previous copier does not count for this one. */
        @Override
        synchronized void spawn() throws IOException {
            done = false;
            commits = 0;
            super.spawn();
        }

        @Override
        protected synchronized void onStdout(int run, String line) {
            String[] parts = line.split(" ");
            if (parts.length >= 2 && (parts[0].equals("COMMITTED") || parts[0].equals("DONE"))) {
                progress = Math.max(progress, Long.parseLong(parts[1]));
                if (run == runs()) {
                    commits++;
                    if (parts[0].equals("DONE")) {
                        done = true;
                    }
                }
            }
        }

        @Override
        public long progress() throws InterruptedException {
            Thread.sleep(10);
            return progress;
        }

        @Override
        public boolean done() {
            return done;
        }

        @Override
        public String status() {
            return "progress " + progress + "/" + RECORDS;
        }

        /** A copier kill waits until this copier has committed once (it is in its copy loop). */
        @Override
        public boolean childKillable() {
            return commits > 0;
        }

        @Override
        String logTail(int lines) {
            return logTail(3, lines, ".err");
        }
    }
}
