package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
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
        Map<Integer, List<String>> inByPart = prefill(broker, in);
        Map<Integer, List<String>> expected = new HashMap<>();
        inByPart.forEach((part, vs) -> expected.put(part, vs.stream().filter(StreamsEosAppMain::kept)
                .map(StreamsEosAppMain::out).collect(Collectors.toList())));
        int expectedTotal = expected.values().stream().mapToInt(List::size).sum();
        assertTrue(expectedTotal > 0 && expectedTotal < RECORDS, "the filter keeps some and drops some");

        Path stateDir = broker.logDir().resolve("streams-state");
        App app = new App(broker, List.of(broker.bootstrap(), appId, in, out, stateDir.toString(),
                Long.toString(PAUSE_MICROS)));
        // (committed output records, what to kill)
        List<Object[]> schedule = new ArrayList<>(List.of(
                new Object[] {expectedTotal * 20 / 100, "broker"},
                new Object[] {expectedTotal * 55 / 100, "app"}));
        List<String> events = new ArrayList<>();
        List<String> unplanned = new ArrayList<>();
        long committed = 0;
        long t0 = System.nanoTime();
        app.spawn();
        try (KafkaConsumer<String, String> monitor = new KafkaConsumer<>(monitorProps(broker))) {
            List<TopicPartition> tps = Kafka.partitions(out, PARTITIONS);
            monitor.assign(tps);
            monitor.seekToBeginning(tps);
            while (true) {
                double elapsed = (System.nanoTime() - t0) / 1e9;
                assertTrue(elapsed < RUN_BUDGET.toSeconds(), "Streams not done after " + RUN_BUDGET
                        + ": committed " + committed + "/" + expectedTotal + ", events " + events
                        + ", unplanned exits " + unplanned + ", app states " + app.states + "\n" + app.logTail(40));
                committed += monitor.poll(Duration.ofMillis(50)).count();
                if (committed >= expectedTotal && schedule.isEmpty()) {
                    break;
                }
                if (!app.proc.isAlive()) {
                    unplanned.add(String.format("t=%.1fs rc=%d committed=%d (app-%d)", elapsed,
                            app.proc.exitValue(), committed, app.n));
                    assertTrue(unplanned.size() <= MAX_UNPLANNED_EXITS, "the Streams JVM exited on its own "
                            + unplanned.size() + " times: " + unplanned + "\n" + app.logTail(60));
                    app.spawn();
                    continue;
                }
                if (!schedule.isEmpty() && committed >= (Integer) schedule.get(0)[0]) {
                    String kind = (String) schedule.get(0)[1];
                    assertTrue(committed < expectedTotal, "Streams finished before the " + kind + " kill (events "
                            + events + "): it processes too fast for this schedule");
                    Thread.sleep(37); // inside a transaction rather than on its edge
                    schedule.remove(0);
                    events.add(String.format("%s kill at %d committed (t=%.1fs, app-%d states %s)", kind,
                            committed, elapsed, app.n, app.states));
                    if (kind.equals("app")) {
                        app.kill9();
                        // Informational: whether the dead app left an open transaction with records
                        // (open until its transaction timeout): OUT's high watermarks above its LSOs.
                        long open = openRecords(broker, out);
                        events.set(events.size() - 1, events.get(events.size() - 1) + ", then HW - LSO = " + open);
                        app.spawn();
                    } else {
                        broker.kill9();
                        broker.start();
                    }
                }
            }
            double runSecs = (System.nanoTime() - t0) / 1e9;
            // SIGTERM: KafkaStreams.close() in the app's shutdown hook ends its last transaction.
            int rc = app.stop(Duration.ofSeconds(40));
            assertTrue(rc == 0 || rc == 143, "Streams JVM exit status after SIGTERM: " + rc + "\n" + app.logTail(40));
            System.out.printf("streams EOS: events %s; unplanned exits %s; %d app JVMs; replaced threads %s; "
                    + "output committed after %.1fs%n", events, unplanned, app.n, app.replaced, runSecs);
        } finally {
            app.kill9();
        }

        String ctx = "events " + events + ", unplanned exits " + unplanned + ", replaced threads " + app.replaced;
        // Every transaction on OUT ended (the dead app's was aborted on its timeout, the last app's closed).
        Map<TopicPartition, Long> hw = Kafka.endOffsets(broker, out, PARTITIONS, "read_uncommitted");
        Map<TopicPartition, Long> lso = waitForLso(broker, out, hw, Duration.ofSeconds(20));
        assertEquals(hw, lso, "OUT: last stable offsets stay below the high watermarks after the app closed; " + ctx);

        Map<Integer, List<ConsumerRecord<String, String>>> got =
                Kafka.readAll(broker, out, PARTITIONS, "read_committed", Duration.ofSeconds(60));
        checkExactlyOnce(got, expected, ctx);

        // Offsets committed in the transactions: the group is at IN's end.
        Map<TopicPartition, Long> inEnd = Kafka.endOffsets(broker, in, PARTITIONS, "read_uncommitted");
        try (Admin a = Kafka.admin(broker)) {
            Map<TopicPartition, OffsetAndMetadata> offs =
                    a.listConsumerGroupOffsets(appId).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            Map<TopicPartition, Long> groupAt = new HashMap<>();
            offs.forEach((tp, om) -> groupAt.put(tp, om == null ? null : om.offset()));
            assertEquals(inEnd, groupAt, "the application's committed offsets are not IN's end offsets; " + ctx);
        }

        // The kills' open transactions were aborted: their records are in OUT's log, not in read_committed.
        long uncommitted = Kafka.values(Kafka.readAll(broker, out, PARTITIONS, "read_uncommitted",
                Duration.ofSeconds(60))).size();
        System.out.printf("streams EOS: OUT holds %d records read_uncommitted, %d read_committed (%d aborted)%n",
                uncommitted, expectedTotal, uncommitted - expectedTotal);
        assertTrue(uncommitted > expectedTotal, "read_uncommitted OUT holds " + uncommitted + " records, no more "
                + "than the " + expectedTotal + " committed: no kill landed in a transaction with records; " + ctx);
    }

    // --- helpers -------------------------------------------------------------------------------

    /** RECORDS values v00000.. with keys k0..k10 (default partitioner); returns IN's values per partition. */
    static Map<Integer, List<String>> prefill(DozeBroker broker, String topic) throws Exception {
        Properties pp = Kafka.producerProps(broker);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < RECORDS; i++) {
                p.send(new ProducerRecord<>(topic, "k" + (i % 11), String.format("v%05d", i)));
            }
            p.flush();
        }
        Map<Integer, List<String>> byPart = new HashMap<>();
        Kafka.readAll(broker, topic, PARTITIONS, "read_committed", Duration.ofSeconds(30))
                .forEach((part, recs) -> byPart.put(part, recs.stream().map(ConsumerRecord::value)
                        .collect(Collectors.toList())));
        assertEquals(RECORDS, byPart.values().stream().mapToInt(List::size).sum(), "input records");
        for (int part = 0; part < PARTITIONS; part++) {
            assertTrue(!byPart.get(part).isEmpty(), "IN[" + part + "] is empty: the keys do not spread");
        }
        return byPart;
    }

    static Properties monitorProps(DozeBroker broker) {
        Properties p = Kafka.consumerProps(broker, "read_committed");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        return p;
    }

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

    /** OUT[p] is exactly the expected values of IN[p], in order; reported as missing/duplicated/unknown first. */
    static void checkExactlyOnce(Map<Integer, List<ConsumerRecord<String, String>>> got,
            Map<Integer, List<String>> expected, String ctx) {
        List<String> values = Kafka.values(got);
        Map<String, Integer> counts = Kafka.counts(values);
        Set<String> want = expected.values().stream().flatMap(List::stream).collect(Collectors.toSet());
        Set<String> missing = new TreeSet<>(want);
        missing.removeAll(counts.keySet());
        List<String> dups = counts.entrySet().stream().filter(e -> e.getValue() > 1)
                .map(e -> e.getKey() + "x" + e.getValue()).sorted().collect(Collectors.toList());
        Set<String> extra = new TreeSet<>(counts.keySet());
        extra.removeAll(want);
        assertTrue(missing.isEmpty() && dups.isEmpty() && extra.isEmpty(), "read_committed OUT holds "
                + values.size() + " records for " + want.size() + " expected: " + missing.size()
                + " missing (e.g. " + missing.stream().limit(5).collect(Collectors.toList()) + "), " + dups.size()
                + " duplicated (e.g. " + dups.stream().limit(5).collect(Collectors.toList()) + "), " + extra.size()
                + " unexpected (e.g. " + extra.stream().limit(5).collect(Collectors.toList()) + "); " + ctx);
        for (int part = 0; part < PARTITIONS; part++) {
            List<String> outPart = got.get(part).stream().map(ConsumerRecord::value).collect(Collectors.toList());
            assertEquals(expected.get(part), outPart, "OUT[" + part + "] is not the kept IN[" + part
                    + "] in order; " + ctx);
        }
    }

    /**
     * The Streams JVM ({@link StreamsEosAppMain}): spawned, followed, SIGKILLed or
     * SIGTERMed. Its files in the test's log dir: app-N.out (stdout, timestamped),
     * app-N.err (stderr), app-N.log (the clients' and Streams' slf4j log).
     */
    static final class App {
        final DozeBroker broker;
        final List<String> args;
        volatile Process proc;
        int n;
        final ConcurrentLinkedQueue<String> states = new ConcurrentLinkedQueue<>();
        final ConcurrentLinkedQueue<String> replaced = new ConcurrentLinkedQueue<>();

        App(DozeBroker broker, List<String> args) {
            this.broker = broker;
            this.args = args;
        }

        void spawn() throws IOException {
            n++;
            String java = ProcessHandle.current().info().command().orElse("java");
            List<String> cmd = new ArrayList<>();
            if (Files.isExecutable(Path.of("/usr/bin/setpriv"))) {
                cmd.addAll(List.of("/usr/bin/setpriv", "--pdeathsig", "KILL", "--"));
            }
            cmd.addAll(List.of(java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                    "-cp", System.getProperty("java.class.path"),
                    "-Dorg.slf4j.simpleLogger.logFile=" + broker.logDir().resolve("app-" + n + ".log"),
                    "-Dorg.slf4j.simpleLogger.showDateTime=true",
                    StreamsEosAppMain.class.getName()));
            cmd.addAll(args);
            Process p = new ProcessBuilder(cmd)
                    .redirectError(ProcessBuilder.Redirect.appendTo(
                            broker.logDir().resolve("app-" + n + ".err").toFile()))
                    .start();
            proc = p;
            int gen = n;
            Path outLog = broker.logDir().resolve("app-" + n + ".out");
            Thread t = new Thread(() -> follow(p, gen, outLog), "streams-app-" + n + "-stdout");
            t.setDaemon(true);
            t.start();
        }

        private void follow(Process p, int gen, Path outLog) {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(),
                    StandardCharsets.UTF_8));
                 PrintWriter w = new PrintWriter(Files.newBufferedWriter(outLog))) {
                String line;
                while ((line = r.readLine()) != null) {
                    w.println(System.nanoTime() / 1_000_000 + " " + line);
                    w.flush();
                    if (line.startsWith("STATE ")) {
                        states.add(gen + ":" + line.substring(6));
                    } else if (line.startsWith("THREAD_REPLACED ")) {
                        replaced.add(gen + ":" + line.substring(16));
                    }
                }
            } catch (IOException e) {
                // Process.destroy() closes the pipe under a live reader: the end of its output.
            }
        }

        void kill9() {
            if (proc != null && proc.isAlive()) {
                proc.destroyForcibly();
                DozeBroker.waitFor(proc, Duration.ofSeconds(10));
            }
        }

        /** SIGTERM and wait; the exit status, or -1 (after a SIGKILL) if it did not exit in time. */
        int stop(Duration timeout) {
            proc.destroy();
            if (!DozeBroker.waitFor(proc, timeout)) {
                kill9();
                return -1;
            }
            return proc.exitValue();
        }

        String logTail(int lines) {
            StringBuilder sb = new StringBuilder();
            for (int i = Math.max(1, n - 1); i <= n; i++) {
                for (String ext : List.of(".err", ".log")) {
                    Path p = broker.logDir().resolve("app-" + i + ext);
                    try {
                        List<String> all = Files.exists(p) ? Files.readAllLines(p) : List.of();
                        sb.append("--- ").append(p).append(" ---\n");
                        all.subList(Math.max(0, all.size() - lines), all.size())
                                .forEach(l -> sb.append(l).append('\n'));
                    } catch (IOException e) {
                        sb.append("(unreadable: ").append(e).append(")\n");
                    }
                }
            }
            return sb.toString();
        }
    }
}
