package doze.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.function.Function;
import java.util.zip.CRC32C;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.internal.CompressionType;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MutableRecordBatch;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.SimpleRecord;

/**
 * Record sets both ways: a script writes a batch as readable JSON, and a
 * response's record bytes are summarised batch by batch (offsets, producer,
 * flags, control type, values), since their raw bytes hold timestamps and
 * producer ids that legitimately differ between brokers.
 */
final class Records {
    private static final JsonNodeFactory F = JsonNodeFactory.instance;
    /** Byte offsets in a v2 record batch: the CRC, the attributes (which
     * the CRC covers from), the max timestamp. */
    private static final int CRC_OFFSET = 17;
    private static final int ATTRIBUTES_OFFSET = 21;
    private static final int MAX_TIMESTAMP_OFFSET = 35;
    private static final int BATCH_LENGTH_OFFSET = 8;
    private static final int LAST_OFFSET_DELTA_OFFSET = 23;
    private static final int RECORDS_COUNT_OFFSET = 57;
    private static final int RECORDS_OFFSET = 61;
    private static final byte LOG_APPEND_TIME_BIT = 0x08;

    private Records() {}

    /**
     * `{"producerId":…, "producerEpoch":…, "baseSequence":…, "transactional":
     * bool, "values":[…], "keys":[…], "timestamp":…, "compression": "gzip" |
     * "snappy" | "lz4" | "zstd", "corruptCrc": bool, "maxTimestamp":…,
     * "logAppendTime": bool}` as base64 record-set bytes. Keys are null
     * unless given (one per value, null allowed); every record's timestamp
     * is `timestamp` (default 1700000000000). `maxTimestamp` and
     * `logAppendTime` write a header that disagrees with the records, with a
     * CRC that still checks, and so do `recordsCount`, `lastOffsetDelta`,
     * `cutRecordBytes` and `extraRecordBytes` (the batch's end moved, its
     * length with it) and `flipRecordByte` (the records section's byte at
     * that index inverted).
     */
    static TextNode build(JsonNode spec, Function<JsonNode, Long> number) {
        List<SimpleRecord> records = new ArrayList<>();
        long ts = spec.has("timestamp") ? number.apply(spec.get("timestamp")) : 1_700_000_000_000L;
        JsonNode keys = spec.path("keys");
        int i = 0;
        for (JsonNode v : spec.path("values")) {
            JsonNode k = keys.path(i++);
            byte[] key = k.isTextual() ? k.asText().getBytes(StandardCharsets.UTF_8) : null;
            records.add(new SimpleRecord(ts, key, v.asText().getBytes(StandardCharsets.UTF_8)));
        }
        SimpleRecord[] rs = records.toArray(new SimpleRecord[0]);
        long pid = spec.has("producerId") ? number.apply(spec.get("producerId")) : -1;
        short epoch = spec.has("producerEpoch") ? number.apply(spec.get("producerEpoch")).shortValue() : -1;
        int seq = spec.has("baseSequence") ? number.apply(spec.get("baseSequence")).intValue() : -1;
        Compression compression = spec.has("compression")
            ? Compression.of(CompressionType.forName(spec.get("compression").asText())).build()
            : Compression.NONE;
        MemoryRecords m;
        if (spec.path("transactional").asBoolean(false)) {
            m = MemoryRecords.withTransactionalRecords(compression, pid, epoch, seq, rs);
        } else if (pid >= 0) {
            m = MemoryRecords.withIdempotentRecords(compression, pid, epoch, seq, rs);
        } else {
            m = MemoryRecords.withRecords(compression, rs);
        }
        ByteBuffer buf = m.buffer();
        byte[] bytes = new byte[buf.remaining()];
        buf.get(bytes);
        boolean rewritten = false;
        // The batch's shape made wrong on purpose: a header count or offset
        // range that disagrees with the records, or records cut short,
        // followed by stray bytes, or with a byte changed.
        if (spec.has("cutRecordBytes") || spec.has("extraRecordBytes")) {
            int cut = spec.path("cutRecordBytes").asInt(0);
            int extra = spec.path("extraRecordBytes").asInt(0);
            byte[] shaped = new byte[bytes.length - cut + extra];
            System.arraycopy(bytes, 0, shaped, 0, bytes.length - cut);
            bytes = shaped;
            ByteBuffer.wrap(bytes).putInt(BATCH_LENGTH_OFFSET, bytes.length - BATCH_LENGTH_OFFSET - 4);
            rewritten = true;
        }
        if (spec.has("recordsCount")) {
            ByteBuffer.wrap(bytes).putInt(RECORDS_COUNT_OFFSET, number.apply(spec.get("recordsCount")).intValue());
            rewritten = true;
        }
        if (spec.has("lastOffsetDelta")) {
            ByteBuffer.wrap(bytes).putInt(LAST_OFFSET_DELTA_OFFSET, number.apply(spec.get("lastOffsetDelta")).intValue());
            rewritten = true;
        }
        if (spec.has("flipRecordByte")) {
            bytes[RECORDS_OFFSET + spec.get("flipRecordByte").asInt()] ^= (byte) 0xff;
            rewritten = true;
        }
        if (spec.has("maxTimestamp")) {
            ByteBuffer.wrap(bytes).putLong(MAX_TIMESTAMP_OFFSET, number.apply(spec.get("maxTimestamp")));
            rewritten = true;
        }
        if (spec.path("logAppendTime").asBoolean(false)) {
            bytes[ATTRIBUTES_OFFSET + 1] |= LOG_APPEND_TIME_BIT;
            rewritten = true;
        }
        if (rewritten) {
            CRC32C crc = new CRC32C();
            crc.update(bytes, ATTRIBUTES_OFFSET, bytes.length - ATTRIBUTES_OFFSET);
            ByteBuffer.wrap(bytes).putInt(CRC_OFFSET, (int) crc.getValue());
        }
        if (spec.path("corruptCrc").asBoolean(false)) {
            bytes[CRC_OFFSET] ^= (byte) 0xff;
        }
        return TextNode.valueOf(Base64.getEncoder().encodeToString(bytes));
    }

    /** The batches of base64 record-set bytes, summarised. */
    static JsonNode summary(String base64) {
        byte[] bytes = Base64.getDecoder().decode(base64);
        ArrayNode out = F.arrayNode();
        if (bytes.length == 0) {
            return out;
        }
        MemoryRecords m = MemoryRecords.readableRecords(ByteBuffer.wrap(bytes));
        for (MutableRecordBatch b : m.batches()) {
            ObjectNode o = F.objectNode();
            o.put("baseOffset", b.baseOffset());
            o.put("lastOffset", b.lastOffset());
            o.put("producerId", b.producerId());
            o.put("producerEpoch", b.producerEpoch());
            o.put("baseSequence", b.baseSequence());
            o.put("transactional", b.isTransactional());
            o.put("control", b.isControlBatch());
            // The time a broker stamps is its own clock: only a CreateTime
            // batch's max timestamp can be compared.
            o.put("timestampType", b.timestampType().name);
            if (b.timestampType() == TimestampType.CREATE_TIME) {
                o.put("maxTimestamp", b.maxTimestamp());
            }
            ArrayNode values = o.putArray("values");
            try {
                putValues(b, values);
            } catch (RuntimeException e) {
                // A batch whose records do not read (a broker that stored a
                // malformed one): say so, and compare that.
                o.put("unreadable", e.getClass().getSimpleName());
            }
            out.add(o);
        }
        return out;
    }

    private static void putValues(MutableRecordBatch b, ArrayNode values) {
        for (Record r : b) {
            if (b.isControlBatch()) {
                values.add(ControlRecordType.parse(r.key()).name());
            } else if (r.value() == null) {
                values.addNull();
            } else {
                ByteBuffer v = r.value();
                byte[] vb = new byte[v.remaining()];
                v.get(vb);
                values.add(new String(vb, StandardCharsets.UTF_8));
            }
        }
    }
}
