package dev.doze.jvm;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
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
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Client configuration and small bounded helpers shared by the tests. */
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

    public static Properties common(DozeBroker b) {
        Properties p = new Properties();
        p.put("bootstrap.servers", b.bootstrap());
        // Reconnect quickly after a broker restart.
        p.put("reconnect.backoff.ms", "50");
        p.put("reconnect.backoff.max.ms", "500");
        p.put("retry.backoff.ms", "50");
        p.put("retry.backoff.max.ms", "500");
        return p;
    }

    public static Properties producerProps(DozeBroker b) {
        Properties p = common(b);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return p;
    }

    public static Properties consumerProps(DozeBroker b, String isolation) {
        Properties p = common(b);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        return p;
    }

    public static Admin admin(DozeBroker b) {
        Properties p = common(b);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    public static void createTopic(DozeBroker b, String topic, int partitions) throws Exception {
        try (Admin a = admin(b)) {
            a.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
    }

    public static List<TopicPartition> partitions(String topic, int n) {
        return IntStream.range(0, n).mapToObj(i -> new TopicPartition(topic, i)).collect(Collectors.toList());
    }

    /** End offsets as a consumer of that isolation level sees them (LSO for read_committed). */
    public static Map<TopicPartition, Long> endOffsets(DozeBroker b, String topic, int partitions, String isolation) {
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(b, isolation))) {
            return c.endOffsets(partitions(topic, partitions), Duration.ofSeconds(30));
        }
    }

    /**
     * Every record of the topic from offset 0 up to the end offsets seen at the
     * start (high watermark, or LSO for read_committed), per partition in
     * offset order. Fails if the end is not reached within {@code timeout}.
     */
    public static Map<Integer, List<ConsumerRecord<String, String>>> readAll(
            DozeBroker b, String topic, int partitions, String isolation, Duration timeout) {
        Map<Integer, List<ConsumerRecord<String, String>>> out = new HashMap<>();
        List<TopicPartition> tps = partitions(topic, partitions);
        Properties p = consumerProps(b, isolation);
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

    public static List<String> values(Map<Integer, List<ConsumerRecord<String, String>>> recs) {
        return recs.values().stream().flatMap(List::stream).map(ConsumerRecord::value).collect(Collectors.toList());
    }

    /** A value -> count map for finding duplicates. */
    public static Map<String, Integer> counts(List<String> values) {
        Map<String, Integer> m = new HashMap<>();
        values.forEach(v -> m.merge(v, 1, Integer::sum));
        return m;
    }
}
