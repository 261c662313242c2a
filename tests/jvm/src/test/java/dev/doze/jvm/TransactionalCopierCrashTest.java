package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
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
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
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
    /** Records/s the copier sends: ~8 s of copying, so every kill point is reached while it works. */
    static final int RATE = 500;
    static final Duration RUN_BUDGET = Duration.ofSeconds(120);
    static final int MAX_UNPLANNED_EXITS = 6;

    @Test
    @Timeout(value = 200, unit = TimeUnit.SECONDS)
    void copierSurvivesBrokerAndCopierSigkills(DozeBroker broker) throws Exception {
        String in = Kafka.unique("eos-in");
        String out = Kafka.unique("eos-out");
        String group = Kafka.unique("eos-group");
        String txnId = Kafka.unique("eos-copier");
        Kafka.createTopic(broker, in, PARTITIONS);
        Kafka.createTopic(broker, out, PARTITIONS);
        Map<Integer, List<String>> inByPart = prefill(broker, in);

        Copier copier = new Copier(broker, List.of(broker.bootstrap(), in, out, group, txnId,
                Integer.toString(RATE), Integer.toString(RECORDS), Integer.toString(PARTITIONS)));
        // (records committed, what to kill): broker and copier alternately.
        List<Object[]> schedule = new ArrayList<>(List.of(
                new Object[] {RECORDS * 15 / 100, "broker"},
                new Object[] {RECORDS * 35 / 100, "copier"},
                new Object[] {RECORDS * 55 / 100, "broker"},
                new Object[] {RECORDS * 75 / 100, "copier"}));
        List<String> events = new ArrayList<>();
        List<String> unplanned = new ArrayList<>();
        long t0 = System.nanoTime();
        copier.spawn();
        try {
            while (true) {
                double elapsed = (System.nanoTime() - t0) / 1e9;
                assertTrue(elapsed < RUN_BUDGET.toSeconds(), "copier not done after " + RUN_BUDGET + "; progress "
                        + copier.progress + "/" + RECORDS + ", events " + events + ", unplanned exits " + unplanned
                        + "\n" + copier.logTail(40));
                if (copier.done && schedule.isEmpty()) {
                    break;
                }
                if (!copier.proc.isAlive()) {
                    int rc = copier.proc.exitValue();
                    assertFalse(rc == 0 && copier.done, "the copier finished before kill points "
                            + schedule.stream().map(o -> o[0] + " " + o[1]).collect(Collectors.toList())
                            + " (events " + events + "): it copies too fast for this schedule");
                    unplanned.add(String.format("t=%.1fs rc=%d progress=%d log=%s", elapsed, rc, copier.progress,
                            copier.logPath()));
                    assertTrue(unplanned.size() <= MAX_UNPLANNED_EXITS, "the copier exited on its own "
                            + unplanned.size() + " times: " + unplanned + "\n" + copier.logTail(60));
                    copier.spawn();
                    continue;
                }
                if (!schedule.isEmpty()) {
                    int point = (Integer) schedule.get(0)[0];
                    String kind = (String) schedule.get(0)[1];
                    // A copier kill waits until this copier has committed once (it is in its copy loop).
                    if (copier.progress >= point && (kind.equals("broker") || copier.commits > 0)) {
                        Thread.sleep(37); // inside a transaction rather than on its edge
                        schedule.remove(0);
                        events.add(String.format("%s at %d (progress %d, t=%.1fs)", kind, point, copier.progress,
                                elapsed));
                        if (kind.equals("copier")) {
                            copier.kill9();
                            copier.spawn();
                        } else {
                            broker.kill9();
                            broker.start();
                        }
                        continue;
                    }
                }
                Thread.sleep(10);
            }
            assertTrue(copier.proc.waitFor(30, TimeUnit.SECONDS), "copier printed DONE but did not exit");
            assertEquals(0, copier.proc.exitValue(), "copier exit status after DONE\n" + copier.logTail(40));
        } finally {
            copier.kill9();
        }
        System.out.printf("events %s; unplanned copier exits %s; %d copier JVMs; %.1fs%n", events, unplanned,
                copier.n, (System.nanoTime() - t0) / 1e9);

        // No transaction is left open on OUT (the last copier's last one committed).
        Map<TopicPartition, Long> hw = Kafka.endOffsets(broker, out, PARTITIONS, "read_uncommitted");
        Map<TopicPartition, Long> lso = Kafka.endOffsets(broker, out, PARTITIONS, "read_committed");
        assertEquals(hw, lso, "OUT: last stable offsets differ from the high watermarks after the copier finished");
        checkExactlyOnce(broker, out, inByPart, "events " + events + ", unplanned exits " + unplanned);
        checkCommitted(broker, group, in);
    }

    @Test
    @Timeout(value = 90, unit = TimeUnit.SECONDS)
    void abandonedCopierIsFencedByNewInstance(DozeBroker broker) throws Exception {
        String in = Kafka.unique("zombie-in");
        String out = Kafka.unique("zombie-out");
        String group = Kafka.unique("zombie-group");
        String txnId = Kafka.unique("zombie-copier");
        Kafka.createTopic(broker, in, PARTITIONS);
        Kafka.createTopic(broker, out, PARTITIONS);
        int n = 200;
        Map<Integer, List<String>> inByPart = prefill(broker, in, n);

        // Instance A: one transaction with some records and its offsets, then abandoned.
        KafkaProducer<String, String> zombie = new KafkaProducer<>(txnProducerProps(broker, txnId));
        zombie.initTransactions();
        int zombieSent;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(groupConsumerProps(broker, group))) {
            c.subscribe(List.of(in));
            ConsumerRecords<String, String> recs = pollSome(c, Duration.ofSeconds(30));
            zombie.beginTransaction();
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (ConsumerRecord<String, String> r : recs) {
                zombie.send(new ProducerRecord<>(out, r.partition(), r.key(), r.value())).get(30, TimeUnit.SECONDS);
                offsets.put(new TopicPartition(in, r.partition()), new OffsetAndMetadata(r.offset() + 1));
            }
            zombie.sendOffsetsToTransaction(offsets, c.groupMetadata());
            zombieSent = recs.count();
            // Its consumer is gone (left the group); its producer lives on, transaction open.
        }
        Map<TopicPartition, Long> hwWithZombie = Kafka.endOffsets(broker, out, PARTITIONS, "read_uncommitted");
        assertEquals(zombieSent, hwWithZombie.values().stream().mapToLong(Long::longValue).sum(),
                "the abandoned transaction's records are in OUT's log");

        // Instance B, same transactional.id: fences A (aborting its transaction) and copies everything.
        try (KafkaProducer<String, String> p = new KafkaProducer<>(txnProducerProps(broker, txnId));
             KafkaConsumer<String, String> c = new KafkaConsumer<>(groupConsumerProps(broker, group))) {
            p.initTransactions();
            c.subscribe(List.of(in));
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
                    p.send(new ProducerRecord<>(out, r.partition(), r.key(), r.value()));
                    offsets.put(new TopicPartition(in, r.partition()), new OffsetAndMetadata(r.offset() + 1));
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

        checkExactlyOnce(broker, out, inByPart, "zombie sent " + zombieSent);
        checkCommitted(broker, group, in);
    }

    // --- helpers -------------------------------------------------------------------------------

    static Map<Integer, List<String>> prefill(DozeBroker broker, String topic) throws Exception {
        return prefill(broker, topic, RECORDS);
    }

    /** Writes n records (idempotent, not transactional); returns each partition's values in offset order. */
    static Map<Integer, List<String>> prefill(DozeBroker broker, String topic, int n) throws Exception {
        Properties pp = Kafka.producerProps(broker);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(topic, "k" + (i % 7), String.format("v%05d", i)));
            }
            p.flush();
        }
        Map<Integer, List<String>> byPart = new HashMap<>();
        Kafka.readAll(broker, topic, PARTITIONS, "read_committed", Duration.ofSeconds(30))
                .forEach((part, recs) -> byPart.put(part, recs.stream().map(ConsumerRecord::value)
                        .collect(Collectors.toList())));
        assertEquals(n, byPart.values().stream().mapToInt(List::size).sum(), "input records");
        return byPart;
    }

    /** read_committed OUT holds every input value once, each partition in input order. */
    static void checkExactlyOnce(DozeBroker broker, String out, Map<Integer, List<String>> inByPart, String ctx) {
        Map<Integer, List<ConsumerRecord<String, String>>> got =
                Kafka.readAll(broker, out, PARTITIONS, "read_committed", Duration.ofSeconds(60));
        List<String> values = Kafka.values(got);
        Map<String, Integer> counts = Kafka.counts(values);
        Set<String> expected = inByPart.values().stream().flatMap(List::stream).collect(Collectors.toSet());
        Set<String> missing = new TreeSet<>(expected);
        missing.removeAll(counts.keySet());
        List<String> dups = counts.entrySet().stream().filter(e -> e.getValue() > 1)
                .map(e -> e.getKey() + "x" + e.getValue()).sorted().collect(Collectors.toList());
        Set<String> extra = new TreeSet<>(counts.keySet());
        extra.removeAll(expected);
        assertTrue(missing.isEmpty() && dups.isEmpty() && extra.isEmpty(), "read_committed OUT holds "
                + values.size() + " records for " + expected.size() + " inputs: " + missing.size()
                + " missing (e.g. " + missing.stream().limit(5).collect(Collectors.toList()) + "), " + dups.size()
                + " duplicated (e.g. " + dups.stream().limit(5).collect(Collectors.toList()) + "), " + extra.size()
                + " unknown; " + ctx);
        for (int part = 0; part < PARTITIONS; part++) {
            List<String> outPart = got.get(part).stream().map(ConsumerRecord::value).collect(Collectors.toList());
            assertEquals(inByPart.get(part), outPart, "OUT[" + part + "] is not IN[" + part + "] in order; " + ctx);
        }
    }

    /** The group's committed offsets are IN's end offsets. */
    static void checkCommitted(DozeBroker broker, String group, String in) throws Exception {
        Map<TopicPartition, Long> ends = Kafka.endOffsets(broker, in, PARTITIONS, "read_committed");
        try (Admin a = Kafka.admin(broker)) {
            Map<TopicPartition, OffsetAndMetadata> committed =
                    a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            Map<TopicPartition, Long> got = new HashMap<>();
            committed.forEach((tp, om) -> got.put(tp, om.offset()));
            assertEquals(ends, got, "group " + group + " committed offsets vs IN's end offsets");
        }
    }

    static Properties txnProducerProps(DozeBroker broker, String txnId) {
        Properties pp = Kafka.producerProps(broker);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return pp;
    }

    static Properties groupConsumerProps(DozeBroker broker, String group) {
        Properties cp = Kafka.consumerProps(broker, "read_committed");
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
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
     * The copier JVM: spawned, followed, SIGKILLed. Its files in the test's log dir:
     * copier-N.out (stdout, timestamped), copier-N.err (stderr: its own lines and
     * stack traces), copier-N.log (the client's slf4j log).
     */
    static final class Copier {
        final DozeBroker broker;
        final List<String> args;
        volatile Process proc;
        int n;
        volatile long progress;
        volatile boolean done;
        volatile int commits;

        Copier(DozeBroker broker, List<String> args) {
            this.broker = broker;
            this.args = args;
        }

        Path logPath() {
            return broker.logDir().resolve("copier-" + n + ".log");
        }

        void spawn() throws IOException {
            n++;
            done = false;
            commits = 0;
            String java = ProcessHandle.current().info().command().orElse("java");
            List<String> cmd = new ArrayList<>();
            if (Files.isExecutable(Path.of("/usr/bin/setpriv"))) {
                cmd.addAll(List.of("/usr/bin/setpriv", "--pdeathsig", "KILL", "--"));
            }
            cmd.addAll(List.of(java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                    "-cp", System.getProperty("java.class.path"),
                    "-Dorg.slf4j.simpleLogger.logFile=" + logPath(),
                    "-Dorg.slf4j.simpleLogger.showDateTime=true",
                    CopierMain.class.getName()));
            cmd.addAll(args);
            Process p = new ProcessBuilder(cmd)
                    .redirectError(ProcessBuilder.Redirect.appendTo(
                            broker.logDir().resolve("copier-" + n + ".err").toFile()))
                    .start();
            proc = p;
            Path outLog = broker.logDir().resolve("copier-" + n + ".out");
            Thread t = new Thread(() -> follow(p, outLog), "copier-" + n + "-stdout");
            t.setDaemon(true);
            t.start();
        }

        private void follow(Process p, Path outLog) {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(),
                    StandardCharsets.UTF_8));
                 PrintWriter w = new PrintWriter(Files.newBufferedWriter(outLog))) {
                String line;
                while ((line = r.readLine()) != null) {
                    w.println(System.nanoTime() / 1_000_000 + " " + line);
                    w.flush();
                    String[] parts = line.split(" ");
                    if (parts.length >= 2 && (parts[0].equals("COMMITTED") || parts[0].equals("DONE"))) {
                        synchronized (this) {
                            progress = Math.max(progress, Long.parseLong(parts[1]));
                            if (p == proc) {
                                commits++;
                                if (parts[0].equals("DONE")) {
                                    done = true;
                                }
                            }
                        }
                    }
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        void kill9() {
            if (proc != null && proc.isAlive()) {
                proc.destroyForcibly();
                DozeBroker.waitFor(proc, Duration.ofSeconds(10));
            }
        }

        String logTail(int lines) {
            StringBuilder sb = new StringBuilder();
            for (int i = Math.max(1, n - 2); i <= n; i++) {
                Path p = broker.logDir().resolve("copier-" + i + ".err");
                try {
                    List<String> all = Files.exists(p) ? Files.readAllLines(p) : List.of();
                    sb.append("--- ").append(p).append(" ---\n");
                    all.subList(Math.max(0, all.size() - lines), all.size()).forEach(l -> sb.append(l).append('\n'));
                } catch (IOException e) {
                    sb.append("(unreadable: ").append(e).append(")\n");
                }
            }
            return sb.toString();
        }
    }
}
