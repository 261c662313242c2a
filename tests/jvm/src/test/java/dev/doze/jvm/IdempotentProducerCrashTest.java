package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * An idempotent producer (acks=all, retries on) sends numbered records while
 * the broker is SIGKILLed and restarted five times mid-stream. Afterwards a
 * consumer from the beginning finds every acknowledged record exactly once, at
 * the offset it was acknowledged with, and each partition in send order.
 *
 * <p>Also run by the pom's second surefire execution with the newest 4.x
 * client; the test checks that the client on the classpath is the one meant.
 */
@ExtendWith(DozeExtension.class)
class IdempotentProducerCrashTest {
    static final int PARTITIONS = 3;
    static final int RECORDS = 30_000;
    static final int KILLS = 5;
    /** Records sent per millisecond-ish slice: ~6,000/s, so the run spans several seconds. */
    static final int PER_SLICE = 30;

    @Test
    @Timeout(value = 150, unit = TimeUnit.SECONDS)
    void everyAcknowledgedRecordExactlyOnceAcrossBrokerSigkills(DozeBroker broker) throws Exception {
        String expected = System.getProperty("doze.expectKafkaVersion");
        if (expected != null) {
            assertEquals(expected, Kafka.clientVersion(), "kafka-clients on the test classpath");
        }
        System.out.println("kafka-clients " + Kafka.clientVersion() + " (" + Kafka.clientJar() + ") against " + broker);
        String topic = Kafka.unique("idem-crash");
        Kafka.createTopic(broker, topic, PARTITIONS);

        Properties pp = Kafka.producerProps(broker);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.RETRIES_CONFIG, Integer.toString(Integer.MAX_VALUE));
        pp.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "90000");
        pp.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "2");
        pp.put(ProducerConfig.BATCH_SIZE_CONFIG, "16384");
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");

        // acked[i] = "partition:offset" of record i once acknowledged.
        Map<Integer, String> acked = new ConcurrentHashMap<>();
        Map<Integer, Exception> failed = new ConcurrentHashMap<>();
        AtomicInteger ackCount = new AtomicInteger();
        AtomicReference<Throwable> senderError = new AtomicReference<>();
        List<String> events = new ArrayList<>();

        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            Thread sender = new Thread(() -> {
                try {
                    for (int i = 0; i < RECORDS; i++) {
                        final int n = i;
                        producer.send(new ProducerRecord<>(topic, n % PARTITIONS, "k" + n, value(n)),
                                (RecordMetadata md, Exception e) -> {
                                    if (e != null) {
                                        failed.put(n, e);
                                    } else {
                                        acked.put(n, md.partition() + ":" + md.offset());
                                        ackCount.incrementAndGet();
                                    }
                                });
                        if (i % PER_SLICE == PER_SLICE - 1) {
                            Thread.sleep(5);
                        }
                    }
                } catch (Throwable t) {
                    senderError.set(t);
                }
            }, "idem-sender");
            sender.setDaemon(true);
            sender.start();

            // Kill while acknowledgements are flowing: at 10%, 25%, 40%, 55% and 70% acked.
            for (int k = 1; k <= KILLS; k++) {
                int at = RECORDS * (10 + 15 * (k - 1)) / 100;
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                while (ackCount.get() < at && failed.isEmpty()) {
                    assertTrue(System.nanoTime() < deadline, "only " + ackCount.get() + " of " + at
                            + " records acknowledged within 60 s before kill " + k + "; events " + events);
                    Thread.sleep(2);
                }
                int before = ackCount.get();
                broker.kill9();
                Thread.sleep(300); // keep sending into the void
                broker.start();
                events.add("kill " + k + " at " + before + " acked");
            }
            sender.join(TimeUnit.SECONDS.toMillis(60));
            assertTrue(!sender.isAlive(), "sender still blocked in send() after 60 s; " + ackCount.get() + " acked");
            if (senderError.get() != null) {
                throw new AssertionError("send() threw", senderError.get());
            }
            producer.flush();
        }
        System.out.println("events " + events + "; acked " + ackCount.get() + ", failed " + failed.size());
        if (!failed.isEmpty()) {
            Map.Entry<Integer, Exception> first = failed.entrySet().stream()
                    .min(Map.Entry.comparingByKey()).orElseThrow();
            Map<String, Long> kinds = failed.values().stream()
                    .collect(Collectors.groupingBy(e -> e.getClass().getName(), Collectors.counting()));
            throw new AssertionError(failed.size() + " of " + RECORDS + " sends failed (" + kinds
                    + "); first: record " + first.getKey() + "; events " + events, first.getValue());
        }
        assertEquals(RECORDS, acked.size(), "acknowledged records");

        Map<Integer, List<ConsumerRecord<String, String>>> got =
                Kafka.readAll(broker, topic, PARTITIONS, "read_uncommitted", Duration.ofSeconds(60));
        List<String> values = Kafka.values(got);
        List<String> dups = Kafka.counts(values).entrySet().stream().filter(e -> e.getValue() > 1)
                .map(e -> e.getKey() + "x" + e.getValue()).sorted().limit(10).collect(Collectors.toList());
        assertTrue(dups.isEmpty(), "records written twice by an idempotent producer (e.g. " + dups + "); events "
                + events + "; " + values.size() + " records in the log for " + RECORDS + " sent");

        Map<String, String> at = new java.util.HashMap<>();
        got.forEach((part, recs) -> recs.forEach(r -> at.put(r.partition() + ":" + r.offset(), r.value())));
        List<String> misplaced = new ArrayList<>();
        for (int i = 0; i < RECORDS && misplaced.size() < 10; i++) {
            String where = acked.get(i);
            if (!value(i).equals(at.get(where))) {
                misplaced.add(value(i) + " acked at " + where + " but there is " + at.get(where));
            }
        }
        assertTrue(misplaced.isEmpty(), "acknowledged records not at their offsets: " + misplaced);
        assertEquals(RECORDS, values.size(), "records in the log (every one acknowledged, none twice)");

        for (int part = 0; part < PARTITIONS; part++) {
            List<ConsumerRecord<String, String>> recs = got.get(part);
            int prev = -1;
            for (ConsumerRecord<String, String> r : recs) {
                int n = Integer.parseInt(r.value().substring(1));
                if (n <= prev || n % PARTITIONS != part) {
                    fail("partition " + part + ": " + r.value() + " at offset " + r.offset() + " after v" + prev
                            + " (send order broken)");
                }
                prev = n;
            }
        }
    }

    static String value(int n) {
        return String.format("v%06d", n);
    }
}
