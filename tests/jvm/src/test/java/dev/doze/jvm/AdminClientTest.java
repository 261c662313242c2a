package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** The Java AdminClient's topic, cluster, group and transaction APIs against one broker. */
@ExtendWith(DozeExtension.class)
@BrokerSettings({"group.initial.rebalance.delay.ms=0"})
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class AdminClientTest {
    static final long T = 30; // seconds per admin call

    @Test
    void createDescribeListDeleteTopics(DozeBroker broker) throws Exception {
        String a = Kafka.unique("adm-a");
        String b = Kafka.unique("adm-b");
        try (Admin admin = Kafka.admin(broker)) {
            admin.createTopics(List.of(new NewTopic(a, 3, (short) 1), new NewTopic(b, 1, (short) 1)))
                    .all().get(T, TimeUnit.SECONDS);
            Node node = admin.describeCluster().nodes().get(T, TimeUnit.SECONDS).iterator().next();

            Map<String, TopicDescription> d = admin.describeTopics(List.of(a, b)).allTopicNames().get(T, TimeUnit.SECONDS);
            assertEquals(3, d.get(a).partitions().size(), a + " partitions");
            assertEquals(1, d.get(b).partitions().size(), b + " partitions");
            assertFalse(d.get(a).isInternal());
            assertNotNull(d.get(a).topicId(), "topic id");
            assertFalse(d.get(a).topicId().equals(d.get(b).topicId()), "two topics with one topic id");
            for (TopicPartitionInfo p : d.get(a).partitions()) {
                assertEquals(node.id(), p.leader().id(), "leader of " + a + "-" + p.partition());
                assertEquals(List.of(node.id()), p.replicas().stream().map(Node::id).collect(Collectors.toList()));
                assertEquals(List.of(node.id()), p.isr().stream().map(Node::id).collect(Collectors.toList()));
            }
            assertEquals(List.of(0, 1, 2), d.get(a).partitions().stream().map(TopicPartitionInfo::partition)
                    .collect(Collectors.toList()));

            Set<String> names = admin.listTopics().names().get(T, TimeUnit.SECONDS);
            assertTrue(names.containsAll(Set.of(a, b)), "listTopics " + names);

            ExecutionException dup = assertThrows(ExecutionException.class, () -> admin.createTopics(
                    List.of(new NewTopic(a, 3, (short) 1))).all().get(T, TimeUnit.SECONDS));
            assertInstanceOf(TopicExistsException.class, dup.getCause(), "second create of " + a);

            admin.deleteTopics(List.of(a)).all().get(T, TimeUnit.SECONDS);
            eventually("listTopics to drop " + a, () -> {
                try {
                    return !admin.listTopics().names().get(T, TimeUnit.SECONDS).contains(a);
                } catch (Exception e) {
                    throw new AssertionError(e);
                }
            });
            ExecutionException gone = assertThrows(ExecutionException.class,
                    () -> admin.describeTopics(List.of(a)).allTopicNames().get(T, TimeUnit.SECONDS));
            assertInstanceOf(UnknownTopicOrPartitionException.class, gone.getCause(), "describe of deleted " + a);
            assertTrue(admin.listTopics().names().get(T, TimeUnit.SECONDS).contains(b), b + " survived");
        }
    }

    @Test
    void describeClusterIsOneNodeThatIsController(DozeBroker broker) throws Exception {
        String clusterId;
        try (Admin admin = Kafka.admin(broker)) {
            DescribeClusterResult r = admin.describeCluster();
            Collection<Node> nodes = r.nodes().get(T, TimeUnit.SECONDS);
            assertEquals(1, nodes.size(), "nodes " + nodes);
            Node node = nodes.iterator().next();
            assertEquals("127.0.0.1", node.host());
            assertEquals(broker.port(), node.port());
            assertEquals(node.id(), r.controller().get(T, TimeUnit.SECONDS).id(), "controller");
            clusterId = r.clusterId().get(T, TimeUnit.SECONDS);
            assertNotNull(clusterId);
            assertFalse(clusterId.isBlank(), "cluster id");
        }
        broker.restartAfterKill9();
        try (Admin admin = Kafka.admin(broker)) {
            assertEquals(clusterId, admin.describeCluster().clusterId().get(T, TimeUnit.SECONDS),
                    "cluster id after a restart on the same data dir");
        }
    }

    @Test
    @SuppressWarnings("deprecation")
    void consumerGroupListDescribeOffsets(DozeBroker broker) throws Exception {
        String topic = Kafka.unique("adm-grp");
        String group = Kafka.unique("adm-group");
        Kafka.createTopic(broker, topic, 2);
        try (KafkaProducer<String, String> p = new KafkaProducer<>(Kafka.producerProps(broker))) {
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>(topic, i % 2, "k", "v" + i)).get(T, TimeUnit.SECONDS);
            }
        }
        Properties cp = Kafka.consumerProps(broker, "read_uncommitted");
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        try (Admin admin = Kafka.admin(broker); KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            Node node = admin.describeCluster().nodes().get(T, TimeUnit.SECONDS).iterator().next();
            c.subscribe(List.of(topic));
            int got = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (got < 10 && System.nanoTime() < deadline) {
                got += c.poll(Duration.ofMillis(200)).count();
            }
            assertEquals(10, got, "records polled by the group member");
            // Commit something other than the end on partition 1, to see offsets are per partition.
            Map<TopicPartition, OffsetAndMetadata> commit = Map.of(
                    new TopicPartition(topic, 0), new OffsetAndMetadata(5, "meta-0"),
                    new TopicPartition(topic, 1), new OffsetAndMetadata(3, "meta-1"));
            c.commitSync(commit, Duration.ofSeconds(T));

            Collection<ConsumerGroupListing> listed = admin.listConsumerGroups().all().get(T, TimeUnit.SECONDS);
            ConsumerGroupListing l = listed.stream().filter(x -> x.groupId().equals(group)).findFirst()
                    .orElseThrow(() -> new AssertionError(group + " not in listConsumerGroups " + listed));
            assertFalse(l.isSimpleConsumerGroup(), "listed as a simple group: " + l);

            ConsumerGroupDescription desc = admin.describeConsumerGroups(List.of(group)).describedGroups()
                    .get(group).get(T, TimeUnit.SECONDS);
            assertEquals(GroupState.STABLE, desc.groupState(), "state of " + desc);
            assertEquals(node.id(), desc.coordinator().id(), "coordinator");
            assertFalse(desc.isSimpleConsumerGroup());
            assertEquals(1, desc.members().size(), "members of " + desc);
            MemberDescription m = desc.members().iterator().next();
            assertEquals(Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1)),
                    m.assignment().topicPartitions(), "the member's assignment");
            assertFalse(desc.partitionAssignor().isEmpty(), "partition assignor");

            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(T, TimeUnit.SECONDS);
            assertEquals(commit, offsets, "listConsumerGroupOffsets");

            c.close(Duration.ofSeconds(T)); // LeaveGroup
            eventually(group + " to become Empty", () -> {
                try {
                    ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups()
                            .get(group).get(T, TimeUnit.SECONDS);
                    return d.groupState() == GroupState.EMPTY && d.members().isEmpty();
                } catch (Exception e) {
                    throw new AssertionError(e);
                }
            });
            assertEquals(commit, admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(T, TimeUnit.SECONDS), "offsets after the member left");
        }
    }

    @Test
    void listAndDescribeTransactionsAndProducers(DozeBroker broker) throws Exception {
        String topic = Kafka.unique("adm-txn");
        String txnId = Kafka.unique("adm-txn-id");
        Kafka.createTopic(broker, topic, 2);
        TopicPartition tp0 = new TopicPartition(topic, 0);
        TopicPartition tp1 = new TopicPartition(topic, 1);
        try (Admin admin = Kafka.admin(broker)) {
            Node node = admin.describeCluster().nodes().get(T, TimeUnit.SECONDS).iterator().next();

            // Partition 0: an idempotent producer, 5 batches with known timestamps.
            Properties ip = Kafka.producerProps(broker);
            ip.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            ip.put(ProducerConfig.ACKS_CONFIG, "all");
            long ts0 = System.currentTimeMillis() - 60_000;
            try (KafkaProducer<String, String> p = new KafkaProducer<>(ip)) {
                for (int i = 0; i < 5; i++) {
                    p.send(new ProducerRecord<>(topic, 0, ts0 + i, "k", "idem-" + i)).get(T, TimeUnit.SECONDS);
                }
            }
            // Partition 1: a transaction left open.
            Properties tpp = Kafka.producerProps(broker);
            tpp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
            tpp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "45000");
            try (KafkaProducer<String, String> tx = new KafkaProducer<>(tpp)) {
                tx.initTransactions();
                tx.beginTransaction();
                RecordMetadata first = tx.send(new ProducerRecord<>(topic, 1, "k", "txn-0")).get(T, TimeUnit.SECONDS);
                tx.send(new ProducerRecord<>(topic, 1, "k", "txn-1")).get(T, TimeUnit.SECONDS);

                Collection<TransactionListing> all = admin.listTransactions().all().get(T, TimeUnit.SECONDS);
                TransactionListing listing = all.stream().filter(x -> x.transactionalId().equals(txnId)).findFirst()
                        .orElseThrow(() -> new AssertionError(txnId + " not in listTransactions " + all));
                assertEquals(TransactionState.ONGOING, listing.state(), "listed state");
                Collection<TransactionListing> ongoing = admin.listTransactions(new ListTransactionsOptions()
                        .filterStates(List.of(TransactionState.ONGOING))).all().get(T, TimeUnit.SECONDS);
                assertTrue(ongoing.stream().anyMatch(x -> x.transactionalId().equals(txnId)),
                        "listTransactions(ONGOING) " + ongoing);
                Collection<TransactionListing> empty = admin.listTransactions(new ListTransactionsOptions()
                        .filterStates(List.of(TransactionState.EMPTY))).all().get(T, TimeUnit.SECONDS);
                assertFalse(empty.stream().anyMatch(x -> x.transactionalId().equals(txnId)),
                        "listTransactions(EMPTY) lists an ongoing transaction: " + empty);

                TransactionDescription td = admin.describeTransactions(List.of(txnId)).description(txnId)
                        .get(T, TimeUnit.SECONDS);
                assertEquals(TransactionState.ONGOING, td.state(), "described state " + td);
                assertEquals(listing.producerId(), td.producerId(), "producer id, listed vs described");
                assertEquals(Set.of(tp1), td.topicPartitions(), "partitions of " + td);
                assertEquals(45_000, td.transactionTimeoutMs(), "timeout of " + td);
                assertEquals(node.id(), td.coordinatorId(), "coordinator");
                assertTrue(td.transactionStartTimeMs().isPresent(), "start time of " + td);
                long started = td.transactionStartTimeMs().getAsLong();
                assertTrue(Math.abs(System.currentTimeMillis() - started) < 60_000, "start time " + started);

                List<ProducerState> p1 = admin.describeProducers(List.of(tp1)).partitionResult(tp1)
                        .get(T, TimeUnit.SECONDS).activeProducers();
                assertEquals(1, p1.size(), "active producers on " + tp1 + ": " + p1);
                assertEquals(td.producerId(), p1.get(0).producerId(), "producer id: describeProducers vs describeTransactions");
                assertEquals(td.producerEpoch(), p1.get(0).producerEpoch(), "epoch");
                assertEquals(1, p1.get(0).lastSequence(), "last sequence on " + tp1);
                assertEquals(first.offset(), p1.get(0).currentTransactionStartOffset().orElse(-1L),
                        "current transaction start offset on " + tp1);

                List<ProducerState> p0 = admin.describeProducers(List.of(tp0)).partitionResult(tp0)
                        .get(T, TimeUnit.SECONDS).activeProducers();
                assertEquals(1, p0.size(), "active producers on " + tp0 + ": " + p0);
                ProducerState s0 = p0.get(0);
                assertEquals(4, s0.lastSequence(), "last sequence of 5 single-record batches");
                assertEquals(0, s0.producerEpoch());
                // lastTimestamp: see describeProducersLastTimestampIsTheBatchTimestamp.
                assertFalse(s0.currentTransactionStartOffset().isPresent(), "an idempotent producer has no transaction");
                assertFalse(s0.producerId() == td.producerId(), "two producers with one id");

                tx.commitTransaction();
                TransactionDescription done = admin.describeTransactions(List.of(txnId)).description(txnId)
                        .get(T, TimeUnit.SECONDS);
                assertEquals(TransactionState.COMPLETE_COMMIT, done.state(), "after commit: " + done);
                assertTrue(done.topicPartitions().isEmpty(), "partitions after commit: " + done);
                List<ProducerState> after = admin.describeProducers(List.of(tp1)).partitionResult(tp1)
                        .get(T, TimeUnit.SECONDS).activeProducers();
                assertFalse(after.get(0).currentTransactionStartOffset().isPresent(),
                        "transaction start offset after commit: " + after);
            }
            assertThrows(ExecutionException.class, () -> admin.describeTransactions(List.of(Kafka.unique("nope")))
                    .all().get(T, TimeUnit.SECONDS), "describeTransactions of an unknown transactional id");
        }
    }

    @Test
    void fenceProducersFencesAnOpenTransaction(DozeBroker broker) throws Exception {
        String topic = Kafka.unique("adm-fence");
        String txnId = Kafka.unique("adm-fence-id");
        Kafka.createTopic(broker, topic, 1);
        Properties tpp = Kafka.producerProps(broker);
        tpp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        tpp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        try (Admin admin = Kafka.admin(broker); KafkaProducer<String, String> tx = new KafkaProducer<>(tpp)) {
            tx.initTransactions();
            tx.beginTransaction();
            tx.send(new ProducerRecord<>(topic, 0, "k", "fenced-0")).get(T, TimeUnit.SECONDS);
            TransactionDescription before = admin.describeTransactions(List.of(txnId)).description(txnId)
                    .get(T, TimeUnit.SECONDS);
            assertEquals(TransactionState.ONGOING, before.state());

            admin.fenceProducers(List.of(txnId)).all().get(T, TimeUnit.SECONDS);

            TransactionDescription after = admin.describeTransactions(List.of(txnId)).description(txnId)
                    .get(T, TimeUnit.SECONDS);
            assertEquals(before.producerId(), after.producerId(), "producer id kept by fencing");
            assertTrue(after.producerEpoch() > before.producerEpoch(),
                    "epoch not bumped by fenceProducers: " + before + " -> " + after);
            assertTrue(after.state() == TransactionState.COMPLETE_ABORT || after.state() == TransactionState.EMPTY,
                    "the fenced producer's open transaction is not aborted: " + after);

            KafkaException e = assertThrows(KafkaException.class, tx::commitTransaction,
                    "a producer fenced by fenceProducers committed");
            System.out.println("fenced producer's commitTransaction: " + e);
            assertTrue(e instanceof ProducerFencedException || e instanceof InvalidProducerEpochException,
                    "commit failed, but not as fenced: " + e);
        }
        Map<TopicPartition, Long> hw = Kafka.endOffsets(broker, topic, 1, "read_uncommitted");
        Map<TopicPartition, Long> lso = Kafka.endOffsets(broker, topic, 1, "read_committed");
        assertEquals(hw, lso, "the aborted transaction still holds the last stable offset back");
        assertTrue(hw.get(new TopicPartition(topic, 0)) >= 2, "record + abort marker in the log: " + hw);
        assertEquals(List.of(), Kafka.values(Kafka.readAll(broker, topic, 1, "read_committed", Duration.ofSeconds(20))),
                "read_committed sees the fenced transaction's record");
    }

    /**
     * Kafka reports a producer's lastTimestamp as its last batch's max
     * timestamp (the producer's CreateTime), before and after a restart.
     */
    @Test
    void describeProducersLastTimestampIsTheBatchTimestamp(DozeBroker broker) throws Exception {
        String topic = Kafka.unique("adm-ts");
        Kafka.createTopic(broker, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        Properties ip = Kafka.producerProps(broker);
        ip.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        ip.put(ProducerConfig.ACKS_CONFIG, "all");
        long ts = System.currentTimeMillis() - 60_000;
        try (KafkaProducer<String, String> p = new KafkaProducer<>(ip)) {
            p.send(new ProducerRecord<>(topic, 0, ts, "k", "v")).get(T, TimeUnit.SECONDS);
        }
        long[] seen = new long[2];
        for (int round = 0; round < 2; round++) {
            try (Admin admin = Kafka.admin(broker)) {
                List<ProducerState> ps = admin.describeProducers(List.of(tp)).partitionResult(tp)
                        .get(T, TimeUnit.SECONDS).activeProducers();
                assertEquals(1, ps.size(), "active producers " + ps);
                seen[round] = ps.get(0).lastTimestamp();
            }
            if (round == 0) {
                broker.restartAfterKill9();
            }
        }
        assertEquals(List.of(ts, ts), List.of(seen[0], seen[1]),
                "lastTimestamp before / after a kill -9 restart (the record's timestamp is " + ts + ")");
    }

    static void eventually(String what, Supplier<Boolean> cond) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!cond.get()) {
            assertTrue(System.nanoTime() < deadline, "timed out waiting for " + what);
            DozeBroker.sleep(100);
        }
    }
}
