package doze.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.lang.reflect.Field;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.Type;
import java.util.Iterator;
import java.util.Map;

/**
 * Kafka's JSON converters want every field of a version present; a script
 * names only those that matter. The rest are taken from the JSON form of a
 * default-constructed message (and of each array element's class), which
 * is what a Java client sends for a field it does not set.
 */
final class Defaults {
    private Defaults() {}

    static JsonNode fill(Class<?> dataClass, JsonNode body, short version) throws ReflectiveOperationException {
        ObjectNode full = (ObjectNode) defaults(dataClass, version);
        Iterator<Map.Entry<String, JsonNode>> it = body.fields();
        while (it.hasNext()) {
            Map.Entry<String, JsonNode> e = it.next();
            if (!full.has(e.getKey())) {
                throw new IllegalArgumentException(dataClass.getSimpleName() + " v" + version
                        + " has no field " + e.getKey() + " (fields: " + fieldNames(full) + ")");
            }
            JsonNode v = e.getValue();
            Class<?> element = elementClass(dataClass, e.getKey());
            if (v.isArray() && element != null) {
                ArrayNode a = Script.F.arrayNode();
                for (JsonNode item : v) {
                    a.add(item.isObject() ? fill(element, item, version) : item);
                }
                v = a;
            } else if (v.isObject() && !e.getKey().equals("records")) {
                Class<?> struct = fieldClass(dataClass, e.getKey());
                if (struct != null && !struct.getName().startsWith("java.")) {
                    v = fill(struct, v, version);
                }
            }
            full.set(e.getKey(), v);
        }
        return full;
    }

    private static String fieldNames(ObjectNode o) {
        StringBuilder b = new StringBuilder();
        o.fieldNames().forEachRemaining(n -> b.append(n).append(' '));
        return b.toString().trim();
    }

    /** The JSON form of a default instance of a message or one of its structs. */
    private static JsonNode defaults(Class<?> c, short version) throws ReflectiveOperationException {
        Object instance = c.getConstructor().newInstance();
        String converterName;
        Class<?> outer = c.getEnclosingClass();
        if (outer == null) {
            converterName = c.getName() + "JsonConverter";
        } else {
            converterName = outer.getName() + "JsonConverter$" + c.getSimpleName() + "JsonConverter";
        }
        Class<?> converter = Class.forName(converterName);
        return (JsonNode) converter.getMethod("write", c, short.class).invoke(null, instance, version);
    }

    private static Field field(Class<?> c, String name) {
        try {
            return c.getDeclaredField(name);
        } catch (NoSuchFieldException e) {
            return null;
        }
    }

    private static Class<?> fieldClass(Class<?> c, String name) {
        Field f = field(c, name);
        return f == null ? null : f.getType();
    }

    /** The element class of an array field (a List<X> or an XCollection of X). */
    private static Class<?> elementClass(Class<?> c, String name) {
        Field f = field(c, name);
        if (f == null) {
            return null;
        }
        Type t = f.getGenericType();
        if (t instanceof ParameterizedType p && p.getActualTypeArguments()[0] instanceof Class<?> e) {
            return e.getName().startsWith("java.") ? null : e;
        }
        Type sup = f.getType().getGenericSuperclass();
        if (sup instanceof ParameterizedType p && p.getActualTypeArguments()[0] instanceof Class<?> e) {
            return e;
        }
        return null;
    }
}
