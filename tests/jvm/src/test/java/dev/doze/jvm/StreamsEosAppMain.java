package dev.doze.jvm;

import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The Kafka Streams application of {@link KafkaStreamsEosCrashTest}, run as its
 * own JVM so that the test can SIGKILL it.
 *
 * <p>A stateless topology, IN → filter → mapValues → OUT: a record whose
 * value's number is a multiple of {@link #DROP_EVERY} is dropped, every other
 * value {@code v} becomes {@code out(v)}. No state store, no repartition topic,
 * so no internal topic is created. {@code processing.guarantee=exactly_once_v2},
 * {@code commit.interval.ms=100} (a transaction every 100 ms), one stream
 * thread, and mapValues sleeps PAUSE_MICROS per record so that processing
 * lasts long enough for the test's kill points.
 *
 * <p>Prints {@code STATE <new state>} on every state change of the client and
 * {@code THREAD_REPLACED} when a stream thread dies (it is replaced). SIGTERM
 * closes the client (its open transaction is committed or aborted) and exits 0;
 * the ERROR state (or NOT_RUNNING without SIGTERM) exits 2.
 *
 * <p>With TOPOLOGY {@code count} (a seventh argument; {@code stateless} is the
 * default) the topology is stateful instead: IN → groupByKey → count (the
 * store {@link #COUNT_STORE}, its changelog a compacted topic Streams creates,
 * written in the same transactions) → OUT, each update as the count in
 * decimal. The record cache is off, so every input record gives one update:
 * for a key seen n times OUT holds "1" .. "n" in order, exactly once.
 *
 * <p>Arguments: BOOTSTRAP APPLICATION_ID IN OUT STATE_DIR PAUSE_MICROS [TOPOLOGY]
 */
public final class StreamsEosAppMain {
    /** Every value whose number is a multiple of this is filtered out. */
    static final int DROP_EVERY = 4;

    static boolean kept(String value) {
        return Integer.parseInt(value.substring(1)) % DROP_EVERY != 0;
    }

    static String out(String value) {
        return "out-" + value;
    }

    static Topology topology(String in, String out, long pauseMicros) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
                .filter((k, v) -> kept(v))
                .mapValues(v -> {
                    pause(pauseMicros);
                    return out(v);
                })
                .to(out, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    /** The count topology's store: its changelog is {@code <application.id>-counts-changelog}. */
    static final String COUNT_STORE = "counts";

    static Topology countTopology(String in, String out, long pauseMicros) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
                .peek((k, v) -> pause(pauseMicros))
                .groupByKey()
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(COUNT_STORE)
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .mapValues(count -> Long.toString(count))
                .to(out, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    public static void main(String[] args) throws Exception {
        String topology = args.length > 6 ? args[6] : "stateless";
        run(args[0], args[1], args[2], args[3], args[4], Long.parseLong(args[5]), topology);
    }

    static void run(String bootstrap, String appId, String in, String out, String stateDir, long pauseMicros,
            String topology) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        // A single broker: internal topics (there are none in this topology) with one replica.
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "classic");
        // Reconnect quickly after a broker restart.
        p.put(StreamsConfig.RECONNECT_BACKOFF_MS_CONFIG, 50);
        p.put(StreamsConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 500);
        p.put(StreamsConfig.RETRY_BACKOFF_MS_CONFIG, 50);
        // A dead instance leaves the group after 3 s (the broker allows >= 1 s here).
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 3000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 500);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG), 200);
        // A dead instance's open transaction is aborted by the broker after 5 s (Streams'
        // default is 10 s); until then the group's pending offsets block its successor.
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 5000);
        // Records leave at once, so a kill finds them in the log inside an open transaction.
        p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG), 10000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.MAX_BLOCK_MS_CONFIG), 30000);

        // Every update of the count store goes out (no record cache).
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        Topology t = switch (topology) {
            case "stateless" -> topology(in, out, pauseMicros);
            case "count" -> countTopology(in, out, pauseMicros);
            default -> throw new IllegalArgumentException("topology " + topology);
        };
        KafkaStreams streams = new KafkaStreams(t, p);
        CountDownLatch stopped = new CountDownLatch(1);
        AtomicInteger exitCode = new AtomicInteger(0);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR) {
                exitCode.set(2);
                stopped.countDown();
            } else if (now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            log("stream thread died: " + e);
            e.printStackTrace();
            System.out.println("THREAD_REPLACED " + e.getClass().getName());
            System.out.flush();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Thread hook = new Thread(() -> {
            log("SIGTERM: closing");
            streams.close(Duration.ofSeconds(30));
            log("closed");
        }, "streams-closer");
        Runtime.getRuntime().addShutdownHook(hook);
        streams.start();
        stopped.await();
        if (exitCode.get() != 0) {
            log("state ERROR: exiting " + exitCode.get());
            Runtime.getRuntime().halt(exitCode.get());
        }
        // NOT_RUNNING: closed by the shutdown hook (SIGTERM), which the JVM is running.
    }

    static void pause(long micros) {
        long until = System.nanoTime() + micros * 1000;
        while (System.nanoTime() < until) {
            try {
                Thread.sleep(0, 200_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    static void log(String msg) {
        System.err.println(java.time.LocalTime.now() + " streams-app: " + msg);
    }
}
