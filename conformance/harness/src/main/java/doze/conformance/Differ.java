package doze.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Differential conformance: plays every script of conformance/scripts against
 * Apache Kafka and against doze-kafka, compares the normalised responses
 * field by field, and fails on any difference not listed (with its reason)
 * in conformance/DIFFERENCES.md. With --record it also writes each script
 * with Kafka's answers to conformance/recordings/, which core's test replays.
 *
 * Usage: Differ --kafka HOST:PORT --doze HOST:PORT --scripts DIR
 *               --differences FILE [--record DIR] [--only NAME]
 */
public final class Differ {
    /** `- `script` step N `path`: reason` (step may be `*`). */
    private static final Pattern LISTED = Pattern.compile("^- `([^`]+)` step (\\d+|\\*) `([^`]+)`");
    static final ObjectMapper JSON = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);

    private record Listed(String script, String step, String path) {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            a.put(argv[i], argv[i + 1]);
        }
        String kafka = a.get("--kafka");
        String doze = a.get("--doze");
        File[] files = new File(a.get("--scripts")).listFiles((d, n) -> n.endsWith(".json"));
        Arrays.sort(files);
        List<Listed> listed = listed(Path.of(a.get("--differences")));
        String run = "r" + Long.toString(System.currentTimeMillis() % 100_000_000L, 36);
        Script.warm(kafka, run);
        Script.warm(doze, run);
        Set<Listed> used = new HashSet<>();
        // Scripts played in this run: a listed difference of a script not
        // played (another --scripts dir, or --only) says nothing here.
        Set<String> played = new HashSet<>();
        int unlisted = 0;
        int compared = 0;
        for (File f : files) {
            JsonNode script = JSON.readTree(f);
            String name = script.get("name").asText();
            if (a.containsKey("--only") && !a.get("--only").equals(name)) {
                continue;
            }
            played.add(name);
            String token = run + "x" + (compared + 1);
            List<JsonNode> fromKafka = new Script(script, kafka, token + "k").play();
            List<JsonNode> fromDoze = new Script(script, doze, token + "d").play();
            for (int i = 0; i < fromKafka.size(); i++) {
                List<String> diffs = new ArrayList<>();
                List<String> prefixes = new ArrayList<>();
                diff("", fromKafka.get(i), fromDoze.get(i), diffs, prefixes);
                compared++;
                for (String p : prefixes) {
                    System.out.printf("  prefix  %s step %d %s%n", name, i, p);
                }
                for (String d : diffs) {
                    String path = d.substring(0, d.indexOf(' '));
                    Listed hit = match(listed, name, i, path);
                    if (hit != null) {
                        used.add(hit);
                        System.out.printf("  listed  %s step %d %s%n", name, i, d);
                    } else {
                        unlisted++;
                        System.out.printf("  DIFFERS %s step %d %s%n", name, i, d);
                        System.out.printf("          step: %s%n", script.get("steps").get(i));
                    }
                }
            }
            System.out.printf("%s: %d steps compared%n", name, fromKafka.size());
            if (a.containsKey("--record")) {
                record(Path.of(a.get("--record")), f.getName(), script, fromKafka);
            }
        }
        for (Listed l : listed) {
            if (!used.contains(l) && played.contains(l.script)) {
                System.out.printf("  note: DIFFERENCES.md lists %s step %s %s, not seen this run%n",
                        l.script, l.step, l.path);
            }
        }
        System.out.printf("conformance: %d steps compared with Apache Kafka, %d differences not in DIFFERENCES.md%n",
                compared, unlisted);
        System.exit(unlisted == 0 ? 0 : 1);
    }

    private static List<Listed> listed(Path differences) throws Exception {
        List<Listed> out = new ArrayList<>();
        for (String line : Files.readAllLines(differences)) {
            Matcher m = LISTED.matcher(line);
            if (m.find()) {
                out.add(new Listed(m.group(1), m.group(2), m.group(3)));
            }
        }
        return out;
    }

    private static Listed match(List<Listed> listed, String script, int step, String path) {
        for (Listed l : listed) {
            boolean stepMatches = l.step.equals("*") || l.step.equals(Integer.toString(step));
            if (l.script.equals(script) && stepMatches && path.startsWith(l.path)) {
                return l;
            }
        }
        return null;
    }

    /**
     * Kafka 4.3.1 ends a fetch's records before a transaction marker that
     * follows data, though more lies below its high watermark (seen in every
     * such case; a fetch from the marker's offset gets the rest). doze sends
     * on up to the bound. Both are valid answers that clients read the same
     * way, so when Kafka's batches are fewer and doze's next one is a control
     * batch, only the batches Kafka sent are compared (DIFFERENCES.md).
     */
    private static boolean endsBeforeControlBatch(String path, JsonNode k, JsonNode d) {
        return path.endsWith(".records") && d.size() > k.size()
                && d.get(k.size()).path("control").asBoolean(false);
    }

    /** Appends `path kafka=… doze=…` for every leaf where the two differ. */
    static void diff(String path, JsonNode k, JsonNode d, List<String> out, List<String> prefixes) {
        if (k == null || d == null || k.getNodeType() != d.getNodeType()) {
            if (k == null ? d != null : !k.equals(d)) {
                out.add((path.isEmpty() ? "." : path) + " kafka=" + k + " doze=" + d);
            }
            return;
        }
        if (k.isObject()) {
            Set<String> keys = new TreeSet<>();
            k.fieldNames().forEachRemaining(keys::add);
            d.fieldNames().forEachRemaining(keys::add);
            for (String key : keys) {
                diff(path + "." + key, k.get(key), d.get(key), out, prefixes);
            }
        } else if (k.isArray()) {
            int compare = k.size();
            if (endsBeforeControlBatch(path, k, d)) {
                prefixes.add(String.format("%s kafka sent %d batches, doze %d (from a control batch on)",
                        path, k.size(), d.size()));
            } else if (k.size() != d.size()) {
                out.add(path + " kafka=" + k + " doze=" + d);
                return;
            }
            for (int i = 0; i < compare; i++) {
                diff(path + "[" + i + "]", k.get(i), d.get(i), out, prefixes);
            }
        } else if (!k.equals(d)) {
            out.add(path + " kafka=" + k + " doze=" + d);
        }
    }

    private static void record(Path dir, String file, JsonNode script, List<JsonNode> answers) throws Exception {
        ObjectNode rec = JSON.createObjectNode();
        rec.put("name", script.get("name").asText());
        rec.put("source", "Recorded from Apache Kafka 4.3.1 (org.apache.kafka:kafka_2.13:4.3.1, one KRaft"
                + " node, transaction.version=1) by `make conformance-record`; responses normalised as"
                + " conformance/harness/src/main/java/doze/conformance/Normal.java says.");
        if (script.has("about")) {
            rec.set("about", script.get("about"));
        }
        rec.set("setup", script.get("setup"));
        ArrayNode steps = rec.putArray("steps");
        Iterator<JsonNode> it = script.get("steps").iterator();
        for (JsonNode answer : answers) {
            ObjectNode s = ((ObjectNode) it.next()).deepCopy();
            s.set("response", answer);
            steps.add(s);
        }
        Files.createDirectories(dir);
        Files.writeString(dir.resolve(file), JSON.writeValueAsString(rec) + "\n");
    }
}
