package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Kafka Streams 4.3.1, {@code exactly_once_v2}, stateful: IN → groupByKey →
 * count → OUT ({@link StreamsEosAppMain} with topology {@code count}), through
 * a broker SIGKILL and a SIGKILL of the Streams JVM, as the stateless
 * {@link KafkaStreamsEosCrashTest} does.
 *
 * <p>The count store's changelog is a compacted topic that Streams creates
 * and writes in the same transactions as OUT and the group's offsets. The
 * broker rolls small segments and its cleaner looks often, so the changelog
 * is cleaned while the application runs: a killed instance's successor (its
 * local state wiped, as EOS does after an unclean stop) restores the counts
 * from a compacted, transactional changelog with aborted transactions in it.
 *
 * <p>Checked at the end: read_committed OUT holds, for each key seen n times
 * in IN, the updates "1" .. "n" exactly once and in order; the changelog read
 * committed holds each key's final count as its latest value, and fewer
 * records than it was written (the cleaner took superseded ones out); the
 * group's offsets are IN's end; every transaction ended.
 */
@ExtendWith(DozeExtension.class)
@BrokerSettings({"transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
        "group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000",
        "log.segment.bytes=65536", "log.cleaner.backoff.ms=200", "log.cleaner.min.cleanable.ratio=0.01"})
class KafkaStreamsCountEosCrashTest {
    static final int PARTITIONS = 3;
    static final int RECORDS = 8_000;
    /** IN's keys k0..k39: each counted 200 times. */
    static final int KEYS = 40;
    static final long PAUSE_MICROS = 1_000;
    static final Duration RUN_BUDGET = Duration.ofSeconds(100);
    static final int MAX_UNPLANNED_EXITS = 3;

    @Test
    @Timeout(value = 170, unit = TimeUnit.SECONDS)
    void countByKeyEosV2SurvivesBrokerAndAppSigkills(DozeBroker broker) throws Exception {
        String in = Kafka.unique("count-in");
        String out = Kafka.unique("count-out");
        String appId = Kafka.unique("count-eos");
        String changelog = appId + "-" + StreamsEosAppMain.COUNT_STORE + "-changelog";
        Kafka.createTopic(broker, in, PARTITIONS);
        Kafka.createTopic(broker, out, PARTITIONS);
        Kafka.prefill(broker, in, PARTITIONS, RECORDS, KEYS);
        Map<String, Long> finalCounts = new TreeMap<>();
        for (int i = 0; i < RECORDS; i++) {
            finalCounts.merge("k" + (i % KEYS), 1L, Long::sum);
        }

        Path stateDir = broker.logDir().resolve("streams-state");
        KafkaStreamsEosCrashTest.App app = new KafkaStreamsEosCrashTest.App(broker, List.of(broker.bootstrap(),
                appId, in, out, stateDir.toString(), Long.toString(PAUSE_MICROS), "count"));
        KillSchedule schedule = new KillSchedule(broker, app, RUN_BUDGET, MAX_UNPLANNED_EXITS, List.of(
                KillSchedule.broker(RECORDS * 20 / 100),
                KillSchedule.child(RECORDS * 55 / 100)));
        try (KafkaStreamsEosCrashTest.Output output = new KafkaStreamsEosCrashTest.Output(broker, out, app,
                RECORDS)) {
            double runSecs = schedule.run(output);
            int rc = app.stop(Duration.ofSeconds(40));
            assertTrue(rc == 0 || rc == 143, "Streams JVM exit status after SIGTERM: " + rc + "\n" + app.logTail(40));
            System.out.printf("streams count EOS: events %s; unplanned exits %s; %d app JVMs; replaced threads %s; "
                    + "output committed after %.1fs%n", schedule.events, schedule.unplanned, app.runs(), app.replaced,
                    runSecs);
        } finally {
            app.kill9();
        }
        String ctx = "events " + schedule.events + ", unplanned exits " + schedule.unplanned + ", replaced threads "
                + app.replaced;

        Map<TopicPartition, Long> hw = Kafka.endOffsets(broker, out, PARTITIONS, "read_uncommitted");
        Map<TopicPartition, Long> lso = KafkaStreamsEosCrashTest.waitForLso(broker, out, hw, Duration.ofSeconds(20));
        assertEquals(hw, lso, "OUT: transactions left open after the app closed; " + ctx);

        // OUT: per key, the updates 1..n, each once, in order.
        Map<String, List<String>> updates = new TreeMap<>();
        Kafka.readAll(broker, out, PARTITIONS, "read_committed", Duration.ofSeconds(60)).values()
                .forEach(recs -> recs.forEach(r -> updates.computeIfAbsent(r.key(), k -> new ArrayList<>())
                        .add(r.value())));
        List<String> wrong = new ArrayList<>();
        finalCounts.forEach((key, n) -> {
            List<String> want = new ArrayList<>();
            for (long c = 1; c <= n; c++) {
                want.add(Long.toString(c));
            }
            List<String> got = updates.getOrDefault(key, List.of());
            if (!got.equals(want)) {
                wrong.add(key + ": " + got.size() + " updates, first differing at " + firstDifference(got, want)
                        + " (got " + got.subList(0, Math.min(got.size(), 8)) + "...)");
            }
        });
        assertTrue(wrong.isEmpty() && updates.keySet().equals(finalCounts.keySet()),
                "OUT read_committed is not each key's 1..n exactly once: " + wrong.size() + " keys wrong, e.g. "
                        + wrong.stream().limit(5).toList() + "; keys " + updates.keySet() + "; " + ctx);

        assertEquals(Kafka.endOffsets(broker, in, PARTITIONS, "read_uncommitted"), Kafka.groupOffsets(broker, appId),
                "the application's committed offsets are not IN's end offsets; " + ctx);

        // The changelog, read committed: each key's latest value is its final
        // count, and the cleaner has taken superseded updates out.
        Map<String, Long> latest = new HashMap<>();
        int[] records = new int[1];
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        do {
            latest.clear();
            records[0] = 0;
            readChangelog(broker, changelog, (k, v) -> {
                records[0]++;
                latest.put(k, v);
            });
            if (records[0] < RECORDS) {
                break;
            }
            Thread.sleep(500);
        } while (System.nanoTime() < deadline);
        System.out.printf("streams count EOS: changelog %s holds %d records read_committed for %d written%n",
                changelog, records[0], RECORDS);
        assertEquals(finalCounts, new TreeMap<>(latest), "the changelog's latest counts; " + ctx);
        assertTrue(records[0] < RECORDS, "the changelog holds " + records[0] + " records read_committed, not "
                + "fewer than the " + RECORDS + " updates written: it was never compacted; " + ctx);
    }

    static int firstDifference(List<String> got, List<String> want) {
        int i = 0;
        while (i < got.size() && i < want.size() && got.get(i).equals(want.get(i))) {
            i++;
        }
        return i;
    }

    interface Visit {
        void record(String key, long value);
    }

    /** Every record of the changelog from its start to its LSO, read_committed; values are 8-byte longs. */
    static void readChangelog(DozeBroker broker, String topic, Visit visit) {
        Properties p = Kafka.consumerProps(broker, "read_committed");
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
        List<TopicPartition> tps = Kafka.partitions(topic, PARTITIONS);
        try (KafkaConsumer<String, byte[]> c = new KafkaConsumer<>(p)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (tps.stream().anyMatch(tp -> c.position(tp, Duration.ofSeconds(30)) < end.get(tp))) {
                assertTrue(System.nanoTime() < deadline, topic + ": end offsets " + end + " not reached");
                for (ConsumerRecord<String, byte[]> r : c.poll(Duration.ofMillis(200))) {
                    if (r.offset() < end.get(new TopicPartition(topic, r.partition())) && r.value() != null) {
                        visit.record(r.key(), ByteBuffer.wrap(r.value()).getLong());
                    }
                }
            }
        }
    }
}
