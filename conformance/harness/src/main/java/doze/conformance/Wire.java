package doze.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.lang.reflect.Method;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.Base64;
import org.apache.kafka.common.message.FetchResponseData;
import org.apache.kafka.common.message.RequestHeaderData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.requests.ResponseHeader;

/**
 * One connection to a broker: requests are built from JSON by kafka-clients'
 * generated JsonConverter of the message (so every API and version is served
 * by Kafka's own schema), and responses are read back the same way.
 */
final class Wire implements AutoCloseable {
    private final Socket socket;
    private final DataInputStream in;
    private final OutputStream out;
    private int correlation = 0;
    /** Requests sent and not yet read, oldest first: (api, version, correlation). */
    private final ArrayDeque<int[]> pending = new ArrayDeque<>();

    Wire(String bootstrap, int timeoutMs) throws IOException {
        String[] hp = bootstrap.split(":");
        socket = new Socket();
        socket.connect(new InetSocketAddress(hp[0], Integer.parseInt(hp[1])), timeoutMs);
        socket.setSoTimeout(timeoutMs);
        socket.setTcpNoDelay(true);
        in = new DataInputStream(socket.getInputStream());
        out = socket.getOutputStream();
    }

    static ApiKeys api(String name) {
        for (ApiKeys k : ApiKeys.values()) {
            if (k.name.equals(name)) {
                return k;
            }
        }
        throw new IllegalArgumentException("no Kafka API named " + name);
    }

    static Method converter(String message, String method, Class<?>... args) {
        try {
            Class<?> c = Class.forName("org.apache.kafka.common.message." + message + "JsonConverter");
            return c.getMethod(method, args);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("no JSON converter for " + message, e);
        }
    }

    /** Sends a request whose body is Kafka's JSON form of the message. */
    void send(String apiName, short version, JsonNode body) throws IOException {
        ApiKeys key = api(apiName);
        ApiMessage data;
        try {
            Class<?> dataClass = key.messageType.newRequest().getClass();
            JsonNode full = Defaults.fill(dataClass, body, version);
            data = (ApiMessage) converter(key.name + "RequestData", "read", JsonNode.class, short.class)
                    .invoke(null, full, version);
        } catch (ReflectiveOperationException e) {
            throw new IllegalArgumentException(apiName + " v" + version + " body " + body + ": " + e.getCause(), e);
        }
        correlation += 1;
        short headerVersion = key.requestHeaderVersion(version);
        RequestHeaderData header = new RequestHeaderData()
                .setRequestApiKey(key.id)
                .setRequestApiVersion(version)
                .setCorrelationId(correlation)
                .setClientId("doze-conformance");
        ObjectSerializationCache cache = new ObjectSerializationCache();
        int size = header.size(cache, headerVersion) + data.size(cache, version);
        ByteBuffer buf = ByteBuffer.allocate(4 + size);
        buf.putInt(size);
        ByteBufferAccessor acc = new ByteBufferAccessor(buf);
        header.write(acc, cache, headerVersion);
        data.write(acc, cache, version);
        out.write(buf.array(), 0, buf.position());
        out.flush();
        pending.add(new int[] {key.id, version, correlation});
    }

    /**
     * Reads the answer to the oldest request sent: its JSON form, or null when
     * the broker closed the connection instead.
     */
    JsonNode receive() throws IOException {
        int[] p = pending.poll();
        if (p == null) {
            throw new IllegalStateException("nothing sent to wait for");
        }
        ApiKeys key = ApiKeys.forId(p[0]);
        short version = (short) p[1];
        int size;
        try {
            size = in.readInt();
        } catch (java.io.EOFException e) {
            return null;
        }
        byte[] frame = new byte[size];
        in.readFully(frame);
        ByteBuffer buf = ByteBuffer.wrap(frame);
        // An ApiVersions request of a version the broker does not know is
        // answered in v0 (KIP-511), header v0.
        short readAs = version;
        if (key == ApiKeys.API_VERSIONS && version > key.latestVersion()) {
            readAs = 0;
        }
        ResponseHeader header = ResponseHeader.parse(buf, key.responseHeaderVersion(readAs));
        if (header.correlationId() != p[2]) {
            throw new IOException("correlation id " + header.correlationId() + ", expected " + p[2]);
        }
        ApiMessage data = key.messageType.newResponse();
        int bodyAt = buf.position();
        try {
            data.read(new ByteBufferAccessor(buf), readAs);
        } catch (RuntimeException e) {
            if (key != ApiKeys.API_VERSIONS) {
                throw e;
            }
            // As Kafka's client does (ApiVersionsResponse.parse): a broker that
            // does not know the version answers in v0.
            buf.position(bodyAt);
            readAs = 0;
            data = key.messageType.newResponse();
            data.read(new ByteBufferAccessor(buf), readAs);
        }
        try {
            JsonNode json = (JsonNode) converter(key.name + "ResponseData", "write", data.getClass(), short.class,
                    boolean.class).invoke(null, data, readAs, true);
            if (data instanceof FetchResponseData fetch) {
                putRecords(fetch, json);
            }
            return json;
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * The JSON converter writes every record set as empty bytes (only its
     * size, when asked not to serialise records): a fetch's records go in
     * here, as base64, for `Normal` to summarise batch by batch.
     */
    private static void putRecords(FetchResponseData fetch, JsonNode json) {
        for (int t = 0; t < fetch.responses().size(); t++) {
            var partitions = fetch.responses().get(t).partitions();
            for (int p = 0; p < partitions.size(); p++) {
                ObjectNode node = (ObjectNode) json.get("responses").get(t).get("partitions").get(p);
                if (partitions.get(p).records() instanceof MemoryRecords records) {
                    ByteBuffer bytes = records.buffer();
                    byte[] copy = new byte[bytes.remaining()];
                    bytes.get(copy);
                    node.put("records", Base64.getEncoder().encodeToString(copy));
                }
            }
        }
    }

    /** Sends raw bytes as a request frame (for requests no schema can build). */
    void sendRaw(short apiKey, short version, byte[] body) throws IOException {
        ApiKeys key = ApiKeys.forId(apiKey);
        correlation += 1;
        short headerVersion = version > key.latestVersion() ? key.requestHeaderVersion(key.latestVersion())
                : key.requestHeaderVersion(version);
        RequestHeaderData header = new RequestHeaderData()
                .setRequestApiKey(apiKey)
                .setRequestApiVersion(version)
                .setCorrelationId(correlation)
                .setClientId("doze-conformance");
        ObjectSerializationCache cache = new ObjectSerializationCache();
        int size = header.size(cache, headerVersion) + body.length;
        ByteBuffer buf = ByteBuffer.allocate(4 + size);
        buf.putInt(size);
        header.write(new ByteBufferAccessor(buf), cache, headerVersion);
        buf.put(body);
        out.write(buf.array(), 0, buf.position());
        out.flush();
        pending.add(new int[] {apiKey, version, correlation});
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
