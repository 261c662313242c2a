package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * A topic's compression.type with the Java client: batches it sends
 * uncompressed and with zstd are stored with the topic's codec (the broker
 * recompresses them, as Kafka's LogValidator does) and its consumer reads
 * every record back in order, as sent.
 */
@ExtendWith(DozeExtension.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class CompressionTypeTest {
    @Test
    void everyTopicCodecReadsBackAsSent(DozeBroker b) throws Exception {
        for (String codec : List.of("uncompressed", "gzip", "snappy", "lz4", "zstd")) {
            String topic = Kafka.unique("codec-" + codec);
            try (Admin a = Kafka.admin(b)) {
                a.createTopics(List.of(new NewTopic(topic, 2, (short) 1)
                        .configs(Map.of("compression.type", codec)))).all().get(30, TimeUnit.SECONDS);
            }
            Map<Integer, List<String>> sent = new TreeMap<>();
            for (String producerCodec : List.of("none", "zstd")) {
                Properties pp = Kafka.producerProps(b);
                pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, producerCodec);
                pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
                List<Future<RecordMetadata>> acks = new ArrayList<>();
                try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
                    for (int i = 0; i < 1000; i++) {
                        String v = producerCodec + "-" + i + "-" + "x".repeat(i % 50);
                        int part = i % 2;
                        acks.add(p.send(new ProducerRecord<>(topic, part, "k" + i, v)));
                        sent.computeIfAbsent(part, k -> new ArrayList<>()).add(v);
                    }
                    p.flush();
                }
                for (Future<RecordMetadata> ack : acks) {
                    ack.get(30, TimeUnit.SECONDS);
                }
            }
            Map<Integer, List<String>> got =
                    Kafka.readValues(b, topic, 2, "read_uncommitted", Duration.ofSeconds(60));
            assertEquals(sent, got, "compression.type=" + codec);
        }
    }
}
