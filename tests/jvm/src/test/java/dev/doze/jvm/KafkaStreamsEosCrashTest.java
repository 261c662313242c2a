package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Kafka Streams 4.3.1 with {@code processing.guarantee=exactly_once_v2}: a
 * stateless topology (filter + mapValues, IN → OUT, see {@link StreamsEosAppMain})
 * in its own JVM, while the test SIGKILLs the broker once (and restarts it) and
 * the Streams JVM once (and starts a new one with the same application.id).
 *
 * <p>Streams' EOS-v2 producer has the transactional.id
 * {@code <application.id>-<process id>-<thread>}; the process id is random for a
 * topology without persistent stores, so the new Streams JVM does not fence the
 * dead one: the dead instance's open transaction (records in OUT and offsets of
 * the group) stays open until the broker aborts it at its transaction.timeout.ms
 * (5 s here), and the new instance's read_committed offset fetch waits for that
 * (UNSTABLE_OFFSET_COMMIT) before it resumes from the last committed offsets.
 *
 * <p>Checked at the end: read_committed OUT holds out(v) exactly once for each
 * input value v that the filter keeps, nothing for the filtered ones, each
 * partition in IN's order (same keys, same partition count, default
 * partitioner); no transaction is left open on OUT; the group's committed
 * offsets are IN's end offsets; and read_uncommitted OUT holds more records
 * than read_committed (the aborted transactions' records: proof that a kill
 * landed in an open transaction).
 */
@ExtendWith(DozeExtension.class)
@BrokerSettings({"transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
        "group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000"})
class KafkaStreamsEosCrashTest {
    static final int PARTITIONS = 3;
    static final int RECORDS = 8_000;
    /** IN's keys k0..k10, spread over the partitions by the default partitioner. */
    static final int KEYS = 11;
    /** mapValues' pause per kept record: ~6 s of processing for the 6,000 kept records. */
    static final long PAUSE_MICROS = 1_000;
    static final Duration RUN_BUDGET = Duration.ofSeconds(100);
    static final int MAX_UNPLANNED_EXITS = 3;

    @Test
    @Timeout(value = 150, unit = TimeUnit.SECONDS)
    void statelessEosV2SurvivesBrokerAndAppSigkills(DozeBroker broker) throws Exception {
        String in = Kafka.unique("streams-in");
        String out = Kafka.unique("streams-out");
        String appId = Kafka.unique("streams-eos");
        Kafka.createTopic(broker, in, PARTITIONS);
        Kafka.createTopic(broker, out, PARTITIONS);
        Map<Integer, List<String>> inByPart = Kafka.prefill(broker, in, PARTITIONS, RECORDS, KEYS);
        inByPart.forEach((part, vs) -> assertTrue(!vs.isEmpty(), "IN[" + part + "] is empty: the keys do not spread"));
        Map<Integer, List<String>> expected = new TreeMap<>();
        inByPart.forEach((part, vs) -> expected.put(part, vs.stream().filter(StreamsEosAppMain::kept)
                .map(StreamsEosAppMain::out).collect(Collectors.toList())));
        int expectedTotal = expected.values().stream().mapToInt(List::size).sum();
        assertTrue(expectedTotal > 0 && expectedTotal < RECORDS, "the filter keeps some and drops some");

        Path stateDir = broker.logDir().resolve("streams-state");
        App app = new App(broker, List.of(broker.bootstrap(), appId, in, out, stateDir.toString(),
                Long.toString(PAUSE_MICROS)));
        // Kills at these numbers of committed output records.
        KillSchedule schedule = new KillSchedule(broker, app, RUN_BUDGET, MAX_UNPLANNED_EXITS, List.of(
                KillSchedule.broker(expectedTotal * 20 / 100),
                KillSchedule.child(expectedTotal * 55 / 100)));
        try (Output output = new Output(broker, out, app, expectedTotal)) {
            double runSecs = schedule.run(output);
            // SIGTERM: KafkaStreams.close() in the app's shutdown hook ends its last transaction.
            int rc = app.stop(Duration.ofSeconds(40));
            assertTrue(rc == 0 || rc == 143, "Streams JVM exit status after SIGTERM: " + rc + "\n" + app.logTail(40));
            System.out.printf("streams EOS: events %s; unplanned exits %s; %d app JVMs; replaced threads %s; "
                    + "output committed after %.1fs%n", schedule.events, schedule.unplanned, app.runs(), app.replaced,
                    runSecs);
        } finally {
            app.kill9();
        }

        String ctx = "events " + schedule.events + ", unplanned exits " + schedule.unplanned + ", replaced threads "
                + app.replaced;
        // Every transaction on OUT ended (the dead app's was aborted on its timeout, the last app's closed).
        Map<TopicPartition, Long> hw = Kafka.endOffsets(broker, out, PARTITIONS, "read_uncommitted");
        Map<TopicPartition, Long> lso = waitForLso(broker, out, hw, Duration.ofSeconds(20));
        assertEquals(hw, lso, "OUT: last stable offsets stay below the high watermarks after the app closed; " + ctx);

        Kafka.assertExactlyOnce(Kafka.readValues(broker, out, PARTITIONS, "read_committed", Duration.ofSeconds(60)),
                expected, ctx);

        // Offsets committed in the transactions: the group is at IN's end.
        assertEquals(Kafka.endOffsets(broker, in, PARTITIONS, "read_uncommitted"), Kafka.groupOffsets(broker, appId),
                "the application's committed offsets are not IN's end offsets; " + ctx);

        // The kills' open transactions were aborted: their records are in OUT's log, not in read_committed.
        long uncommitted = Kafka.values(Kafka.readAll(broker, out, PARTITIONS, "read_uncommitted",
                Duration.ofSeconds(60))).size();
        System.out.printf("streams EOS: OUT holds %d records read_uncommitted, %d read_committed (%d aborted)%n",
                uncommitted, expectedTotal, uncommitted - expectedTotal);
        assertTrue(uncommitted > expectedTotal, "read_uncommitted OUT holds " + uncommitted + " records, no more "
                + "than the " + expectedTotal + " committed: no kill landed in a transaction with records; " + ctx);
    }

    // --- helpers -------------------------------------------------------------------------------

    /** High watermarks minus last stable offsets of a topic, summed over its partitions. */
    static long openRecords(DozeBroker broker, String topic) {
        Map<TopicPartition, Long> hw = Kafka.endOffsets(broker, topic, PARTITIONS, "read_uncommitted");
        Map<TopicPartition, Long> lso = Kafka.endOffsets(broker, topic, PARTITIONS, "read_committed");
        return hw.keySet().stream().mapToLong(tp -> hw.get(tp) - lso.get(tp)).sum();
    }

    static Map<TopicPartition, Long> waitForLso(DozeBroker broker, String topic, Map<TopicPartition, Long> hw,
            Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            Map<TopicPartition, Long> lso = Kafka.endOffsets(broker, topic, PARTITIONS, "read_committed");
            if (lso.equals(hw) || System.nanoTime() > deadline) {
                return lso;
            }
            Thread.sleep(200);
        }
    }

    /**
     * The job's progress: OUT's records as read_committed sees them, counted by
     * a consumer from the beginning.
     */
    static final class Output implements KillSchedule.Job, AutoCloseable {
        final DozeBroker broker;
        final String out;
        final App app;
        final long expectedTotal;
        final KafkaConsumer<String, String> monitor;
        long committed;

        Output(DozeBroker broker, String out, App app, long expectedTotal) {
            this.broker = broker;
            this.out = out;
            this.app = app;
            this.expectedTotal = expectedTotal;
            Properties p = Kafka.consumerProps(broker, "read_committed");
            p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
            p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
            monitor = new KafkaConsumer<>(p);
            List<TopicPartition> tps = Kafka.partitions(out, PARTITIONS);
            monitor.assign(tps);
            monitor.seekToBeginning(tps);
        }

        @Override
        public long progress() {
            committed += monitor.poll(Duration.ofMillis(50)).count();
            return committed;
        }

        @Override
        public boolean done() {
            return committed >= expectedTotal;
        }

        @Override
        public String status() {
            return "committed " + committed + "/" + expectedTotal + ", app states " + app.states;
        }

        /** A kill after the last output would test nothing: the app processes too fast for the schedule. */
        @Override
        public boolean killAfterDoneFails() {
            return true;
        }

        /**
         * Informational: whether the dead app left an open transaction with
         * records (open until its transaction timeout): OUT's high watermarks
         * above its LSOs.
         */
        @Override
        public String afterChildKill() {
            return ", then HW - LSO = " + openRecords(broker, out);
        }

        @Override
        public void close() {
            monitor.close();
        }
    }

    /**
     * The Streams JVMs ({@link StreamsEosAppMain}), SIGKILLed or SIGTERMed, and
     * what they print: their state changes and replaced stream threads.
     */
    static final class App extends ChildJvm {
        /** run:state, for each state change of each app JVM. */
        final ConcurrentLinkedQueue<String> states = new ConcurrentLinkedQueue<>();
        /** run:exception, for each stream thread that died (and was replaced). */
        final ConcurrentLinkedQueue<String> replaced = new ConcurrentLinkedQueue<>();

        App(DozeBroker broker, List<String> args) {
            super(broker.logDir(), "app", StreamsEosAppMain.class, args);
        }

        @Override
        protected void onStdout(int run, String line) {
            if (line.startsWith("STATE ")) {
                states.add(run + ":" + line.substring(6));
            } else if (line.startsWith("THREAD_REPLACED ")) {
                replaced.add(run + ":" + line.substring(16));
            }
        }
    }
}
