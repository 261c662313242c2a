package dev.doze.jvm;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

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

/**
 * The transactional read-process-write copier, run as its own JVM by
 * {@link TransactionalCopierCrashTest} so that it can be SIGKILLed.
 *
 * <p>A read_committed consumer in group GROUP reads IN; each poll's records
 * are written to OUT (same partition, same key and value) in one transaction
 * with the consumer's offsets ({@code sendOffsetsToTransaction(offsets,
 * consumer.groupMetadata())}), then committed. Records are sent at RATE per
 * second, so most of the time a transaction is open. After each commit it
 * prints {@code COMMITTED <sum of committed offsets of its partitions> <partitions>};
 * once the committed offsets reach TOTAL over every partition it prints
 * {@code DONE <total>} and exits 0. A failed transaction is aborted and the
 * consumer rewound to the committed offsets; a fenced producer, or an abort
 * that fails, exits non-zero (the test starts a new copier).
 *
 * <p>Arguments: BOOTSTRAP IN OUT GROUP TRANSACTIONAL_ID RATE TOTAL PARTITIONS
 */
public final class CopierMain {
    public static void main(String[] args) throws Exception {
        copy(args[0], args[1], args[2], args[3], args[4], Integer.parseInt(args[5]), Long.parseLong(args[6]),
                Integer.parseInt(args[7]));
    }

    static void copy(String bootstrap, String in, String out, String group, String txnId, int rate, long total,
            int partitions) throws Exception {
        long pauseNanos = 1_000_000_000L / rate;

        Properties pp = Kafka.transactionalProducerProps(bootstrap, txnId);
        pp.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");

        // A dead copier leaves the group after 4 s, so that its successor gets the partitions.
        Properties cp = Kafka.groupConsumerProps(bootstrap, group);
        cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "4000");
        cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        cp.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "30000");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");

        KafkaProducer<String, String> producer = new KafkaProducer<>(pp);
        producer.initTransactions();
        log("initTransactions done");
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp);
        consumer.subscribe(List.of(in));
        long lastPrinted = -1;
        while (true) {
            ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(100));
            Set<TopicPartition> assigned = consumer.assignment();
            if (recs.isEmpty()) {
                long sum = committedSum(consumer, assigned);
                if (assigned.size() == partitions && sum >= total) {
                    System.out.println("DONE " + sum);
                    System.out.flush();
                    producer.close(Duration.ofSeconds(10));
                    consumer.close(Duration.ofSeconds(10));
                    System.exit(0);
                }
                continue;
            }
            try {
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : recs) {
                    producer.send(new ProducerRecord<>(out, r.partition(), r.key(), r.value()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    long until = System.nanoTime() + pauseNanos;
                    while (System.nanoTime() < until) {
                        Thread.sleep(0, 200_000);
                    }
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
            } catch (ProducerFencedException | InvalidProducerEpochException e) {
                log("fenced: " + e);
                e.printStackTrace();
                System.exit(3);
            } catch (KafkaException e) {
                log("transaction failed, aborting: " + e);
                e.printStackTrace();
                try {
                    producer.abortTransaction();
                } catch (KafkaException e2) {
                    log("abort failed: " + e2);
                    e2.printStackTrace();
                    System.exit(4);
                }
                rewind(consumer);
                continue;
            }
            long sum = positionSum(consumer, assigned);
            if (sum != lastPrinted) {
                System.out.println("COMMITTED " + sum + " " + assigned.size());
                System.out.flush();
                lastPrinted = sum;
            }
        }
    }

    /** Back to the committed offsets (what the aborted transaction had not committed is read again). */
    static void rewind(KafkaConsumer<String, String> consumer) {
        Set<TopicPartition> assigned = consumer.assignment();
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned, Duration.ofSeconds(30));
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata om = committed.get(tp);
            if (om == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, om.offset());
            }
        }
        log("rewound to " + committed);
    }

    static long positionSum(KafkaConsumer<String, String> consumer, Set<TopicPartition> assigned) {
        long sum = 0;
        for (TopicPartition tp : assigned) {
            sum += consumer.position(tp, Duration.ofSeconds(30));
        }
        return sum;
    }

    static long committedSum(KafkaConsumer<String, String> consumer, Set<TopicPartition> assigned) {
        if (assigned.isEmpty()) {
            return 0;
        }
        long sum = 0;
        for (OffsetAndMetadata om : consumer.committed(assigned, Duration.ofSeconds(30)).values()) {
            sum += om == null ? 0 : om.offset();
        }
        return sum;
    }

    static void log(String msg) {
        System.err.println(java.time.LocalTime.now() + " copier: " + msg);
    }
}
