package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Client configuration, small bounded helpers and exactly-once checks shared by
 * the tests. Most helpers take a {@link DozeBroker} or just a bootstrap address:
 * the latter for code that any broker will do for (FlinkKafkaSinkRecoveryTest)
 * and for the child JVMs (CopierMain), which know only the address.
 */
public final class Kafka {
    private Kafka() {
    }

    /**
     * The kafka-clients version on the classpath, from the jar's own
     * kafka/kafka-version.properties (AppInfoParser moved packages in 4.4).
     */
    public static String clientVersion() {
        try (InputStream in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            Properties p = new Properties();
            if (in != null) {
                p.load(in);
            }
            return p.getProperty("version", "unknown");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The jar KafkaProducer was loaded from. */
    public static String clientJar() {
        return String.valueOf(KafkaProducer.class.getProtectionDomain().getCodeSource().getLocation());
    }

    public static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    // --- client properties ---------------------------------------------------------------------

    public static Properties common(DozeBroker b) {
        return common(b.bootstrap());
    }

    public static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        // Reconnect quickly after a broker restart.
        p.put("reconnect.backoff.ms", "50");
        p.put("reconnect.backoff.max.ms", "500");
        p.put("retry.backoff.ms", "50");
        p.put("retry.backoff.max.ms", "500");
        return p;
    }

    public static Properties producerProps(DozeBroker b) {
        return producerProps(b.bootstrap());
    }

    public static Properties producerProps(String bootstrap) {
        Properties p = common(bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return p;
    }

    /** The transactional producer of a read-process-write copier (CopierMain, and the in-JVM copiers). */
    public static Properties transactionalProducerProps(String bootstrap, String transactionalId) {
        Properties p = producerProps(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return p;
    }

    public static Properties consumerProps(DozeBroker b, String isolation) {
        return consumerProps(b.bootstrap(), isolation);
    }

    public static Properties consumerProps(String bootstrap, String isolation) {
        Properties p = common(bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        return p;
    }

    /** The read_committed group consumer of a read-process-write copier (offsets committed in transactions). */
    public static Properties groupConsumerProps(String bootstrap, String group) {
        Properties p = consumerProps(bootstrap, "read_committed");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        return p;
    }

    // --- admin -----------------------------------------------------------------------------------

    public static Admin admin(DozeBroker b) {
        return admin(b.bootstrap());
    }

    public static Admin admin(String bootstrap) {
        Properties p = common(bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    public static void createTopic(DozeBroker b, String topic, int partitions) throws Exception {
        createTopic(b.bootstrap(), topic, partitions);
    }

    public static void createTopic(String bootstrap, String topic, int partitions) throws Exception {
        try (Admin a = admin(bootstrap)) {
            a.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
    }

    /** A group's committed offsets (null for a partition without one). */
    public static Map<TopicPartition, Long> groupOffsets(DozeBroker b, String group) throws Exception {
        try (Admin a = admin(b)) {
            Map<TopicPartition, OffsetAndMetadata> committed =
                    a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            Map<TopicPartition, Long> offsets = new HashMap<>();
            committed.forEach((tp, om) -> offsets.put(tp, om == null ? null : om.offset()));
            return offsets;
        }
    }

    // --- writing and reading back ----------------------------------------------------------------

    public static List<TopicPartition> partitions(String topic, int n) {
        return IntStream.range(0, n).mapToObj(i -> new TopicPartition(topic, i)).collect(Collectors.toList());
    }

    /**
     * Writes n records v00000, v00001, ... with the keys k0 .. k(keys-1) in turn
     * (default partitioner; idempotent, not transactional); returns each
     * partition's values in offset order, as read back.
     */
    public static Map<Integer, List<String>> prefill(DozeBroker b, String topic, int partitions, int n, int keys)
            throws Exception {
        Properties pp = producerProps(b);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(topic, "k" + (i % keys), String.format("v%05d", i)));
            }
            p.flush();
        }
        Map<Integer, List<String>> byPart = readValues(b, topic, partitions, "read_committed", Duration.ofSeconds(30));
        assertEquals(n, byPart.values().stream().mapToInt(List::size).sum(), "input records");
        return byPart;
    }

    /** End offsets as a consumer of that isolation level sees them (LSO for read_committed). */
    public static Map<TopicPartition, Long> endOffsets(DozeBroker b, String topic, int partitions, String isolation) {
        return endOffsets(b.bootstrap(), topic, partitions, isolation);
    }

    public static Map<TopicPartition, Long> endOffsets(String bootstrap, String topic, int partitions,
            String isolation) {
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(bootstrap, isolation))) {
            return c.endOffsets(partitions(topic, partitions), Duration.ofSeconds(30));
        }
    }

    public static Map<Integer, List<ConsumerRecord<String, String>>> readAll(
            DozeBroker b, String topic, int partitions, String isolation, Duration timeout) {
        return readAll(b.bootstrap(), topic, partitions, isolation, timeout);
    }

    /**
     * Every record of the topic from offset 0 up to the end offsets seen at the
     * start (high watermark, or LSO for read_committed), per partition (in
     * partition order) in offset order. Fails if the end is not reached within
     * {@code timeout}.
     */
    public static Map<Integer, List<ConsumerRecord<String, String>>> readAll(
            String bootstrap, String topic, int partitions, String isolation, Duration timeout) {
        Map<Integer, List<ConsumerRecord<String, String>>> out = new TreeMap<>();
        List<TopicPartition> tps = partitions(topic, partitions);
        Properties p = consumerProps(bootstrap, isolation);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            tps.forEach(tp -> out.put(tp.partition(), new ArrayList<>()));
            long deadline = System.nanoTime() + timeout.toNanos();
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp, Duration.ofSeconds(30)) < end.get(tp)) {
                        done = false;
                    }
                }
                if (done) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    Map<TopicPartition, Long> pos = new HashMap<>();
                    tps.forEach(tp -> pos.put(tp, c.position(tp)));
                    throw new AssertionError(topic + " (" + isolation + "): end offsets " + end
                            + " not reached within " + timeout + ", positions " + pos);
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    if (r.offset() < end.get(new TopicPartition(topic, r.partition()))) {
                        out.get(r.partition()).add(r);
                    }
                }
            }
        }
        return out;
    }

    public static Map<Integer, List<String>> readValues(
            DozeBroker b, String topic, int partitions, String isolation, Duration timeout) {
        return readValues(b.bootstrap(), topic, partitions, isolation, timeout);
    }

    /** {@link #readAll}'s values: per partition (in partition order) in offset order. */
    public static Map<Integer, List<String>> readValues(
            String bootstrap, String topic, int partitions, String isolation, Duration timeout) {
        Map<Integer, List<String>> byPart = new TreeMap<>();
        readAll(bootstrap, topic, partitions, isolation, timeout).forEach((part, recs) -> byPart.put(part,
                recs.stream().map(ConsumerRecord::value).collect(Collectors.toList())));
        return byPart;
    }

    public static List<String> values(Map<Integer, List<ConsumerRecord<String, String>>> recs) {
        return recs.values().stream().flatMap(List::stream).map(ConsumerRecord::value).collect(Collectors.toList());
    }

    /** A value -> count map for finding duplicates. */
    public static Map<String, Integer> counts(List<String> values) {
        Map<String, Integer> m = new HashMap<>();
        values.forEach(v -> m.merge(v, 1, Integer::sum));
        return m;
    }

    /**
     * The output of a read-process-write run, read_committed, holds exactly the
     * expected values, each partition in order. The failure names what is
     * missing, duplicated and unexpected first (the ways exactly-once breaks),
     * then the first partition out of order.
     */
    public static void assertExactlyOnce(Map<Integer, List<String>> got, Map<Integer, List<String>> expected,
            String ctx) {
        List<String> values = got.values().stream().flatMap(List::stream).collect(Collectors.toList());
        Map<String, Integer> counts = counts(values);
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
        for (int part : new TreeSet<>(expected.keySet())) {
            assertEquals(expected.get(part), got.get(part), "OUT[" + part + "] is not the expected values of IN["
                    + part + "] in order; " + ctx);
        }
    }
}
