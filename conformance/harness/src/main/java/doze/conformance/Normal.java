package doze.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * What legitimately differs between two brokers answering the same request
 * is replaced by a placeholder, so the rest compares field by field:
 * broker, cluster and node identities, throttle times, timestamps, topic ids,
 * producer ids (named by the script's saved variables where one matches),
 * member ids, error messages (Kafka's texts are its own, a record's error in
 * a Produce answer too), and the order of
 * arrays whose order carries no meaning (sorted after normalising).
 */
final class Normal {
    private static final JsonNodeFactory F = JsonNodeFactory.instance;

    /** Fields whose value says which broker answered, not what it decided. */
    private static final Set<String> IDENTITY = Set.of(
            "clusterId", "nodeId", "host", "port", "rack", "brokerId", "controllerId",
            "leaderId", "coordinatorId", "throttleTimeMs", "errorMessage", "coordinatorEpoch",
            "clusterAuthorizedOperations", "topicAuthorizedOperations", "authorizedOperations",
            "finalizedFeaturesEpoch", "supportedFeatures", "finalizedFeatures", "zkMigrationReady",
            "clientHost", "clientId", "batchIndexErrorMessage");
    /** Fields holding a wall-clock time. */
    private static final Set<String> TIMES = Set.of(
            "logAppendTimeMs", "timestamp", "transactionStartTimeMs", "lastTimestamp",
            "transactionDurationMs");
    /**
     * Arrays whose order is a broker's choice (Kafka answers from hash maps):
     * compared as sets.
     */
    private static final Set<String> UNORDERED = Set.of(
            "topics", "partitions", "responses", "results", "groups", "transactionStates",
            "brokers", "members", "apiKeys", "configs", "partitionResponses", "resultsByTopic",
            "resultsByPartition", "activeProducers", "abortedTransactions", "errors",
            "topicPartitions", "coordinators", "partitionErrors", "resultsByTopicV3AndBelow",
            "topicData", "partitionData", "aliveMembers", "topicErrors");

    private final Map<Long, String> producerNames;
    private final String run;
    private final Map<String, String> members = new HashMap<>();

    Normal(Map<Long, String> producerNames, String run) {
        this.producerNames = producerNames;
        this.run = run;
    }

    JsonNode apply(JsonNode n) {
        return walk(null, n);
    }

    private JsonNode walk(String name, JsonNode n) {
        if (n == null) {
            return null;
        }
        if (n.isObject()) {
            ObjectNode o = F.objectNode();
            Iterator<Map.Entry<String, JsonNode>> it = n.fields();
            while (it.hasNext()) {
                Map.Entry<String, JsonNode> e = it.next();
                o.set(e.getKey(), field(e.getKey(), e.getValue()));
            }
            return o;
        }
        if (n.isArray()) {
            List<JsonNode> items = new ArrayList<>();
            for (JsonNode item : n) {
                items.add(walk(name, item));
            }
            if (name != null && UNORDERED.contains(name)) {
                items.sort(Comparator.comparing(JsonNode::toString));
            }
            ArrayNode a = F.arrayNode();
            a.addAll(items);
            return a;
        }
        if (n.isTextual() && n.asText().contains(run)) {
            return TextNode.valueOf(n.asText().replace(run, "{run}"));
        }
        return n;
    }

    private JsonNode field(String name, JsonNode v) {
        if (name.equals("sessionId")) {
            // A fetch session's id is random; whether one was given is not.
            boolean open = v.isNumber() && v.asLong() != 0;
            return TextNode.valueOf(open ? "<sessionId: open>" : "<sessionId>");
        }
        if (IDENTITY.contains(name)) {
            return TextNode.valueOf("<" + name + ">");
        }
        if (TIMES.contains(name) && v.isNumber() && v.asLong() >= 0) {
            return TextNode.valueOf("<time>");
        }
        if (name.equals("topicId") && v.isTextual() && !v.asText().equals("AAAAAAAAAAAAAAAAAAAAAA")) {
            return TextNode.valueOf("<topicId>");
        }
        if ((name.equals("producerId") || name.equals("producerIds")) && v.isNumber() && v.asLong() >= 0) {
            String saved = producerNames.get(v.asLong());
            return TextNode.valueOf(saved != null ? "$" + saved : "<producerId>");
        }
        if ((name.equals("memberId") || name.equals("leader")) && v.isTextual() && !v.asText().isEmpty()) {
            return TextNode.valueOf(members.computeIfAbsent(v.asText(), k -> "<member" + members.size() + ">"));
        }
        if (name.equals("records") && v.isTextual()) {
            return walk("batches", Records.summary(v.asText()));
        }
        return walk(name, v);
    }
}
