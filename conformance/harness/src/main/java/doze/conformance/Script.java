package doze.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.LongNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

/**
 * Plays one script against one broker. A step is a request (`request`,
 * `version`, `body` in Kafka's JSON names; strings `"$name"` are values saved
 * earlier, `{run}` in a string is this run's token so names never collide on
 * a broker that outlives a run), on connection `conn` (default 1); `send_only`
 * sends without reading, `await` reads the oldest answer pending on `conn`;
 * `save` maps a top-level response field to a name; `retry_while` resends
 * while the response's `errorCode` is one of the codes (Kafka's own clients
 * retry those, and how long a broker keeps answering them is timing);
 * `either` lists error codes a racy step may answer, all shown as one. A
 * `sleep_ms` step waits.
 */
final class Script {
    static final JsonNodeFactory F = JsonNodeFactory.instance;
    private static final int TIMEOUT_MS = 15_000;
    private static final int RETRIES_MAX = 100;
    private static final int SETTLE_MS = 500;

    private final JsonNode script;
    private final String bootstrap;
    private final String run;
    private final Map<String, JsonNode> saved = new HashMap<>();
    private final Map<Long, String> producerNames = new HashMap<>();
    private final Map<Integer, Wire> conns = new HashMap<>();

    Script(JsonNode script, String bootstrap, String run) {
        this.script = script;
        this.bootstrap = bootstrap;
        this.run = run;
    }

    /** The normalised answer of every step (`{"closed": true}` for a closed connection). */
    List<JsonNode> play() throws Exception {
        Normal normal = new Normal(producerNames, run);
        List<JsonNode> answers = new ArrayList<>();
        try {
            setup();
            for (JsonNode step : script.path("steps")) {
                answers.add(step(step, normal));
            }
        } finally {
            for (Wire w : conns.values()) {
                w.close();
            }
        }
        return answers;
    }

    private Wire conn(int n) throws IOException {
        Wire w = conns.get(n);
        if (w == null) {
            w = new Wire(bootstrap, TIMEOUT_MS);
            conns.put(n, w);
        }
        return w;
    }

    private JsonNode step(JsonNode step, Normal normal) throws Exception {
        if (step.has("sleep_ms")) {
            Thread.sleep(step.get("sleep_ms").asLong());
            return F.objectNode().put("slept", true);
        }
        int c = step.path("conn").asInt(1);
        if (step.path("await").asBoolean(false)) {
            return answer(step, conn(c).receive(), normal);
        }
        String api = step.get("request").asText();
        short version = (short) step.get("version").asInt();
        JsonNode body = resolve(step.path("body"));
        if (step.path("send_only").asBoolean(false)) {
            conn(c).send(api, version, body);
            return F.objectNode().put("sent", true);
        }
        JsonNode got = call(c, api, version, body);
        for (int i = 0; i < RETRIES_MAX && retry(step, got); i++) {
            Thread.sleep(50);
            got = call(c, api, version, body);
        }
        return answer(step, got, normal);
    }

    private JsonNode call(int c, String api, short version, JsonNode body) throws IOException {
        Wire w = conn(c);
        w.send(api, version, body);
        JsonNode got = w.receive();
        if (got == null) {
            conns.remove(c).close();
        }
        return got;
    }

    private static boolean retry(JsonNode step, JsonNode got) {
        if (got == null || !step.has("retry_while")) {
            return false;
        }
        for (JsonNode code : step.get("retry_while")) {
            if (hasErrorCode(got, code.asInt())) {
                return true;
            }
        }
        return false;
    }

    /** Whether any errorCode (or partitionErrorCode) in the response is `code`. */
    static boolean hasErrorCode(JsonNode n, int code) {
        for (String f : new String[] {"errorCode", "partitionErrorCode"}) {
            if (n.has(f) && n.get(f).asInt() == code) {
                return true;
            }
        }
        for (JsonNode child : n) {
            if (child.isContainerNode() && hasErrorCode(child, code)) {
                return true;
            }
        }
        return false;
    }

    /** The top-level errorCode, else the first nested one. */
    static int firstErrorCode(JsonNode n) {
        if (n.has("errorCode")) {
            return n.get("errorCode").asInt();
        }
        for (JsonNode child : n) {
            if (child.isContainerNode()) {
                int e = firstErrorCode(child);
                if (e != Integer.MIN_VALUE) {
                    return e;
                }
            }
        }
        return Integer.MIN_VALUE;
    }

    private JsonNode answer(JsonNode step, JsonNode got, Normal normal) {
        if (got == null) {
            return F.objectNode().put("closed", true);
        }
        Iterator<Map.Entry<String, JsonNode>> save = step.path("save").fields();
        while (save.hasNext()) {
            Map.Entry<String, JsonNode> e = save.next();
            JsonNode v = got.get(e.getKey());
            if (v == null) {
                throw new IllegalStateException("response has no " + e.getKey() + ": " + got);
            }
            String name = e.getValue().asText();
            saved.put(name, v);
            if (e.getKey().equals("producerId") && v.asLong() >= 0) {
                producerNames.put(v.asLong(), name);
            }
        }
        JsonNode n = normal.apply(got);
        if (step.has("either")) {
            n = either((ObjectNode) n, step.get("either"));
        }
        return n;
    }

    /** errorCode fields holding one of the racy step's codes show them all. */
    private static JsonNode either(ObjectNode n, JsonNode codes) {
        Iterator<Map.Entry<String, JsonNode>> it = n.fields();
        List<String> keys = new ArrayList<>();
        while (it.hasNext()) {
            keys.add(it.next().getKey());
        }
        for (String k : keys) {
            JsonNode v = n.get(k);
            if (k.equals("errorCode")) {
                for (JsonNode c : codes) {
                    if (c.asInt() == v.asInt()) {
                        n.put(k, "one of " + codes);
                    }
                }
            } else if (v.isObject()) {
                n.set(k, either((ObjectNode) v, codes));
            } else if (v.isArray()) {
                ArrayNode a = F.arrayNode();
                for (JsonNode item : v) {
                    a.add(item.isObject() ? either((ObjectNode) item, codes) : item);
                }
                n.set(k, a);
            }
        }
        return n;
    }

    /** The body with saved values, the run token and record batches filled in. */
    JsonNode resolve(JsonNode n) {
        if (n.isTextual()) {
            String s = n.asText();
            if (s.startsWith("$")) {
                JsonNode v = saved.get(s.substring(1));
                if (v == null) {
                    throw new IllegalStateException(s + " was not saved");
                }
                return v;
            }
            return TextNode.valueOf(s.replace("{run}", run));
        }
        if (n.isObject()) {
            ObjectNode o = F.objectNode();
            Iterator<Map.Entry<String, JsonNode>> it = n.fields();
            while (it.hasNext()) {
                Map.Entry<String, JsonNode> e = it.next();
                if (e.getKey().equals("records") && e.getValue().isObject()) {
                    o.set("records", Records.build(e.getValue(), v -> resolve(v).asLong()));
                } else {
                    o.set(e.getKey(), resolve(e.getValue()));
                }
            }
            return o;
        }
        if (n.isArray()) {
            ArrayNode a = F.arrayNode();
            for (JsonNode item : n) {
                a.add(resolve(item));
            }
            return a;
        }
        return n;
    }

    /** Creates the script's topics and waits until every partition has a leader. */
    private void setup() throws Exception {
        ArrayNode topics = F.arrayNode();
        for (JsonNode t : script.path("setup").path("topics")) {
            ObjectNode o = topics.addObject();
            o.put("name", t.get("name").asText().replace("{run}", run));
            o.put("numPartitions", t.get("partitions").asInt());
            o.put("replicationFactor", 1);
            o.putArray("assignments");
            ArrayNode configs = o.putArray("configs");
            Iterator<Map.Entry<String, JsonNode>> it = t.path("configs").fields();
            while (it.hasNext()) {
                Map.Entry<String, JsonNode> e = it.next();
                configs.addObject().put("name", e.getKey()).put("value", e.getValue().asText());
            }
        }
        if (topics.isEmpty()) {
            return;
        }
        ObjectNode create = F.objectNode();
        create.set("topics", topics);
        create.put("timeoutMs", 30_000);
        create.put("validateOnly", false);
        Wire w = conn(1);
        w.send("CreateTopics", (short) 7, create);
        JsonNode created = w.receive();
        for (JsonNode t : created.path("topics")) {
            if (t.path("errorCode").asInt() != 0) {
                throw new IllegalStateException("setup: " + created);
            }
        }
        ObjectNode meta = F.objectNode();
        ArrayNode names = meta.putArray("topics");
        for (JsonNode t : topics) {
            names.addObject().put("name", t.get("name").asText());
        }
        meta.put("allowAutoTopicCreation", false);
        meta.put("includeTopicAuthorizedOperations", false);
        long deadline = System.currentTimeMillis() + TIMEOUT_MS;
        while (true) {
            w.send("Metadata", (short) 12, meta);
            JsonNode m = w.receive();
            boolean ready = true;
            for (JsonNode t : m.path("topics")) {
                ready &= t.path("errorCode").asInt() == 0;
                for (JsonNode p : t.path("partitions")) {
                    ready &= p.path("errorCode").asInt() == 0 && p.path("leaderId").asInt() >= 0;
                }
            }
            if (ready) {
                // Kafka's metadata names a leader a moment before its replica
                // manager serves the partition (NOT_LEADER_OR_FOLLOWER meanwhile).
                Thread.sleep(SETTLE_MS);
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("setup: partitions without a leader: " + m);
            }
            Thread.sleep(50);
        }
    }

    /** Waits until the broker's group and transaction coordinators answer. */
    static void warm(String bootstrap, String run) throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        try (Wire w = new Wire(bootstrap, TIMEOUT_MS)) {
            for (int keyType = 0; keyType <= 1; keyType++) {
                ObjectNode find = F.objectNode();
                find.put("keyType", keyType);
                find.putArray("coordinatorKeys").add("warm-" + run);
                while (true) {
                    w.send("FindCoordinator", (short) 4, find);
                    JsonNode r = w.receive();
                    if (firstErrorCode(r) == 0) {
                        break;
                    }
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("coordinator not ready: " + r);
                    }
                    Thread.sleep(100);
                }
            }
            ObjectNode init = F.objectNode();
            init.put("transactionalId", "warm-" + run);
            init.put("transactionTimeoutMs", 60_000);
            init.set("producerId", LongNode.valueOf(-1));
            init.put("producerEpoch", -1);
            while (true) {
                w.send("InitProducerId", (short) 4, init);
                JsonNode r = w.receive();
                if (firstErrorCode(r) == 0) {
                    return;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("transaction coordinator not ready: " + r);
                }
                Thread.sleep(100);
            }
        }
    }
}
