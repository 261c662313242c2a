package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.kafka.transaction.KafkaTransactionManager;

/** Spring Kafka (no Spring Boot): KafkaTemplate transactions and a transactional listener container. */
@ExtendWith(DozeExtension.class)
@BrokerSettings({"transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
        "group.initial.rebalance.delay.ms=0"})
class SpringKafkaTransactionsTest {

    static DefaultKafkaProducerFactory<String, String> producerFactory(DozeBroker broker, String txPrefix) {
        Map<String, Object> props = new HashMap<>();
        Kafka.common(broker).forEach((k, v) -> props.put((String) k, v));
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        DefaultKafkaProducerFactory<String, String> pf = new DefaultKafkaProducerFactory<>(props);
        pf.setTransactionIdPrefix(txPrefix);
        return pf;
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void executeInTransactionCommitsAndRollsBack(DozeBroker broker) throws Exception {
        String topic = Kafka.unique("spring-tx");
        Kafka.createTopic(broker, topic, 1);
        DefaultKafkaProducerFactory<String, String> pf = producerFactory(broker, Kafka.unique("spring-tx-") + "-");
        try {
            KafkaTemplate<String, String> template = new KafkaTemplate<>(pf);
            assertTrue(template.isTransactional(), "template is transactional");

            Boolean committed = template.executeInTransaction(t -> {
                t.send(topic, "k", "committed-1");
                t.send(topic, "k", "committed-2");
                return true;
            });
            assertEquals(Boolean.TRUE, committed);

            IllegalStateException thrown = assertThrows(IllegalStateException.class,
                    () -> template.executeInTransaction(t -> {
                        try {
                            // Make sure the record is in the log before the rollback.
                            t.send(topic, "k", "rolled-back").get(20, TimeUnit.SECONDS);
                        } catch (Exception e) {
                            throw new AssertionError("send inside the transaction failed", e);
                        }
                        throw new IllegalStateException("roll back");
                    }));
            assertEquals("roll back", thrown.getMessage());

            template.executeInTransaction(t -> t.send(topic, "k", "committed-3"));
        } finally {
            pf.destroy();
        }

        List<String> uncommitted = Kafka.values(Kafka.readAll(broker, topic, 1, "read_uncommitted",
                Duration.ofSeconds(20)));
        assertEquals(List.of("committed-1", "committed-2", "rolled-back", "committed-3"), uncommitted,
                "read_uncommitted (the rolled-back record was written)");
        List<String> committedOnly = Kafka.values(Kafka.readAll(broker, topic, 1, "read_committed",
                Duration.ofSeconds(20)));
        assertEquals(List.of("committed-1", "committed-2", "committed-3"), committedOnly, "read_committed");
        assertEquals(Kafka.endOffsets(broker, topic, 1, "read_uncommitted"),
                Kafka.endOffsets(broker, topic, 1, "read_committed"), "LSO == high watermark after the last commit");
    }

    /**
     * A ConcurrentMessageListenerContainer (2 consumers, read_committed) with a
     * KafkaTransactionManager: each record's output is sent through the
     * template inside the listener's transaction, with the consumer offsets.
     * Input has an aborted transaction (never seen) and one record whose first
     * delivery throws after sending its output (rolled back, redelivered).
     */
    @Test
    @Timeout(value = 90, unit = TimeUnit.SECONDS)
    void transactionalListenerContainerCopiesExactlyOnce(DozeBroker broker) throws Exception {
        int partitions = 2;
        int records = 40;
        String in = Kafka.unique("spring-in");
        String out = Kafka.unique("spring-out");
        String group = Kafka.unique("spring-group");
        Kafka.createTopic(broker, in, partitions);
        Kafka.createTopic(broker, out, partitions);

        // Input: committed transactions around an aborted one.
        Properties pp = Kafka.producerProps(broker);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, Kafka.unique("spring-prefill"));
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < records / 2; i++) {
                p.send(new ProducerRecord<>(in, i % partitions, "k", "in-" + i));
            }
            p.commitTransaction();
            p.beginTransaction();
            for (int i = 0; i < 4; i++) {
                p.send(new ProducerRecord<>(in, i % partitions, "k", "aborted-" + i));
            }
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            for (int i = records / 2; i < records; i++) {
                p.send(new ProducerRecord<>(in, i % partitions, "k", "in-" + i));
            }
            p.commitTransaction();
        }
        Map<Integer, List<String>> inByPart = new HashMap<>();
        // What the group commits at the end: after each partition's last record (not after
        // the commit marker that follows it: the container commits record offset + 1).
        Map<TopicPartition, Long> inEnds = new HashMap<>();
        Kafka.readAll(broker, in, partitions, "read_committed", Duration.ofSeconds(20)).forEach((part, recs) -> {
            inByPart.put(part, recs.stream().map(ConsumerRecord::value).collect(Collectors.toList()));
            inEnds.put(new TopicPartition(in, part), recs.get(recs.size() - 1).offset() + 1);
        });
        assertEquals(records, inByPart.values().stream().mapToInt(List::size).sum(), "committed input records");

        DefaultKafkaProducerFactory<String, String> pf = producerFactory(broker, Kafka.unique("spring-lc-") + "-");
        KafkaTemplate<String, String> template = new KafkaTemplate<>(pf);
        Map<String, Object> cprops = new HashMap<>();
        Kafka.consumerProps(broker, "read_committed").forEach((k, v) -> cprops.put((String) k, v));
        cprops.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cprops.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        cprops.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        cprops.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5");
        DefaultKafkaConsumerFactory<String, String> cf = new DefaultKafkaConsumerFactory<>(cprops);

        String failOnce = "in-7";
        Map<String, AtomicInteger> deliveries = new ConcurrentHashMap<>();
        List<String> seen = java.util.Collections.synchronizedList(new ArrayList<>());
        ContainerProperties props = new ContainerProperties(in);
        props.setKafkaAwareTransactionManager(new KafkaTransactionManager<>(pf));
        props.setPollTimeout(200);
        props.setMessageListener((MessageListener<String, String>) rec -> {
            int n = deliveries.computeIfAbsent(rec.value(), v -> new AtomicInteger()).incrementAndGet();
            seen.add(rec.value());
            try {
                // Written inside the container's transaction (the template joins it).
                template.send(out, rec.partition(), rec.key(), rec.value().toUpperCase()).get(20, TimeUnit.SECONDS);
            } catch (Exception e) {
                throw new IllegalStateException("send failed", e);
            }
            if (rec.value().equals(failOnce) && n == 1) {
                throw new IllegalStateException("first delivery of " + failOnce + " fails after its send");
            }
        });
        ConcurrentMessageListenerContainer<String, String> container =
                new ConcurrentMessageListenerContainer<>(cf, props);
        container.setConcurrency(2);
        container.setBeanName("doze-container");
        container.start();
        try (Admin admin = Kafka.admin(broker)) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            Map<TopicPartition, Long> committed = Map.of();
            while (!committed.equals(inEnds)) {
                assertTrue(System.nanoTime() < deadline, "group " + group + " committed " + committed
                        + " and not the input's ends " + inEnds + " within 60 s; listener saw " + seen.size()
                        + " deliveries: " + seen);
                Thread.sleep(200);
                Map<TopicPartition, OffsetAndMetadata> c = admin.listConsumerGroupOffsets(group)
                        .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
                committed = c.entrySet().stream().filter(e -> e.getValue() != null)
                        .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
            }
        } finally {
            container.stop();
            pf.destroy();
        }
        assertFalse(container.isRunning());

        assertEquals(2, deliveries.get(failOnce).get(), "deliveries of " + failOnce + " (fails once, then redelivered)");
        assertTrue(seen.stream().noneMatch(v -> v.startsWith("aborted")), "read_committed listener got aborted input: " + seen);

        Map<Integer, List<ConsumerRecord<String, String>>> got =
                Kafka.readAll(broker, out, partitions, "read_committed", Duration.ofSeconds(20));
        for (int part = 0; part < partitions; part++) {
            List<String> expected = inByPart.get(part).stream().map(String::toUpperCase).collect(Collectors.toList());
            List<String> actual = got.get(part).stream().map(ConsumerRecord::value).collect(Collectors.toList());
            assertEquals(expected, actual, "read_committed out[" + part + "]: each input once, in order");
        }
        List<String> raw = Kafka.values(Kafka.readAll(broker, out, partitions, "read_uncommitted",
                Duration.ofSeconds(20)));
        assertEquals(2, raw.stream().filter(v -> v.equals(failOnce.toUpperCase())).count(),
                "the rolled-back output of " + failOnce + " is in the log (aborted) beside the committed one");
    }
}
