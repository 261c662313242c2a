package dev.doze.jvm;

import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.internals.TransactionManager;

/**
 * A {@link KafkaProducer} that can resume a transaction from a stored producer
 * id and epoch without InitProducerId, the way Apache Flink's KafkaSink
 * (EXACTLY_ONCE) commits a pre-committed transaction on recovery. No Flink
 * dependency: this mirrors flink-connector-kafka's
 * {@code org.apache.flink.connector.kafka.sink.internal.FlinkKafkaInternalProducer}
 * (connector 3.x for Flink 1.20 and 4.x for Flink 2.x), reflection on
 * kafka-clients' private {@code KafkaProducer.transactionManager} included:
 *
 * <ul>
 *   <li>{@link #producerId()} / {@link #epoch()}: what Flink stores in its
 *       checkpoint (FlinkKafkaInternalProducer.getProducerId/getEpoch), read
 *       from {@code TransactionManager.producerIdAndEpoch};</li>
 *   <li>{@link #resumeTransaction(long, short)}: FlinkKafkaInternalProducer.resumeTransaction,
 *       step for step: under the TransactionManager's lock,
 *       {@code transitionTo(INITIALIZING)}, {@code txnPartitionMap.reset()}, set
 *       {@code producerIdAndEpoch}, {@code transitionTo(READY)},
 *       {@code transitionTo(IN_TRANSACTION)}, {@code transactionStarted = true}
 *       (so that commitTransaction really sends EndTxn although this producer
 *       sent nothing). A following {@link #commitTransaction()} then sends
 *       FindCoordinator and EndTxn(COMMIT) with the stored id and epoch.</li>
 * </ul>
 *
 * <p>Works with kafka-clients 4.3.1 (its TransactionManager still has those
 * fields, the private {@code transitionTo(State)} and {@code TxnPartitionMap.reset()},
 * and the state machine allows UNINITIALIZED → INITIALIZING → READY → IN_TRANSACTION).
 * Flink's {@code flushNewPartitions} (AddPartitionsToTxn before a pre-commit) is
 * not needed here: {@link #flush()} returns only after every record is
 * acknowledged, and the client sends no batch to a partition before that
 * partition has been added to the transaction.
 */
final class FlinkStyleProducer extends KafkaProducer<String, String> {
    private static final String STATE_ENUM = "org.apache.kafka.clients.producer.internals.TransactionManager$State";

    FlinkStyleProducer(Properties props, String transactionalId) {
        super(withTransactionalId(props, transactionalId));
    }

    private static Properties withTransactionalId(Properties props, String transactionalId) {
        Properties p = new Properties();
        p.putAll(props);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        return p;
    }

    long producerId() {
        return (long) field(field(transactionManager(), "producerIdAndEpoch"), "producerId");
    }

    short epoch() {
        return (short) field(field(transactionManager(), "producerIdAndEpoch"), "epoch");
    }

    /** FlinkKafkaInternalProducer.resumeTransaction(producerId, epoch). */
    void resumeTransaction(long producerId, short epoch) {
        if (producerId < 0 || epoch < 0) {
            throw new IllegalStateException("Incorrect values for producerId " + producerId + " and epoch " + epoch);
        }
        Object tm = transactionManager();
        synchronized (tm) {
            Object txnPartitionMap = field(tm, "txnPartitionMap");
            transitionTo(tm, "INITIALIZING");
            invoke(txnPartitionMap, "reset");
            setField(tm, "producerIdAndEpoch", producerIdAndEpoch(producerId, epoch));
            transitionTo(tm, "READY");
            transitionTo(tm, "IN_TRANSACTION");
            // Without it commitTransaction() completes locally and sends no EndTxn.
            setField(tm, "transactionStarted", true);
        }
    }

    /** Flink closes its producers without waiting (close() is close(Duration.ZERO)): no abort is sent. */
    void closeNow() {
        close(Duration.ZERO);
    }

    private Object transactionManager() {
        return field(this, KafkaProducer.class, "transactionManager");
    }

    private static Object producerIdAndEpoch(long producerId, short epoch) {
        try {
            Class<?> type = TransactionManager.class.getDeclaredField("producerIdAndEpoch").getType();
            Constructor<?> c = type.getDeclaredConstructor(Long.TYPE, Short.TYPE);
            c.setAccessible(true);
            return c.newInstance(producerId, epoch);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("Incompatible KafkaProducer version", e);
        }
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    private static void transitionTo(Object tm, String state) {
        try {
            Class<Enum> stateClass = (Class<Enum>) Class.forName(STATE_ENUM);
            Method m = tm.getClass().getDeclaredMethod("transitionTo", stateClass);
            m.setAccessible(true);
            m.invoke(tm, Enum.valueOf(stateClass, state));
        } catch (InvocationTargetException e) {
            throw e.getCause() instanceof RuntimeException re ? re : new IllegalStateException(e.getCause());
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("Incompatible KafkaProducer version", e);
        }
    }

    private static Object invoke(Object o, String method) {
        try {
            Method m = o.getClass().getDeclaredMethod(method);
            m.setAccessible(true);
            return m.invoke(o);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("Incompatible KafkaProducer version", e);
        }
    }

    private static Object field(Object o, String name) {
        return field(o, o.getClass(), name);
    }

    private static Object field(Object o, Class<?> clazz, String name) {
        try {
            Field f = clazz.getDeclaredField(name);
            f.setAccessible(true);
            return f.get(o);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("Incompatible KafkaProducer version", e);
        }
    }

    private static void setField(Object o, String name, Object value) {
        try {
            Field f = o.getClass().getDeclaredField(name);
            f.setAccessible(true);
            f.set(o, value);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("Incompatible KafkaProducer version", e);
        }
    }
}
