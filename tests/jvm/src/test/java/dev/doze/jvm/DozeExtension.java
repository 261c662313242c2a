package dev.doze.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;

import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * Gives a test method a running {@link DozeBroker} parameter: a free loopback
 * port, a fresh temp data dir, logs under target/doze-logs/&lt;class&gt;.&lt;method&gt;/.
 * After the test the broker is stopped (SIGTERM); when the test failed, the
 * tail of every broker log is printed (surefire keeps it in the test's
 * -output.txt) and the data dir is kept, otherwise it is deleted.
 */
public final class DozeExtension implements ParameterResolver, AfterEachCallback {
    private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(DozeExtension.class);

    public static Path logRoot() {
        return Path.of(System.getProperty("doze.logDir", "target/doze-logs")).toAbsolutePath();
    }

    static Path testLogDir(ExtensionContext ctx) {
        String name = ctx.getRequiredTestClass().getSimpleName() + "." + ctx.getRequiredTestMethod().getName()
                + "-kafka-" + Kafka.clientVersion();
        return logRoot().resolve(name);
    }

    @Override
    public boolean supportsParameter(ParameterContext pc, ExtensionContext ec) {
        return pc.getParameter().getType() == DozeBroker.class;
    }

    @Override
    public Object resolveParameter(ParameterContext pc, ExtensionContext ec) {
        BrokerSettings s = ec.getRequiredTestMethod().getAnnotation(BrokerSettings.class);
        if (s == null) {
            s = ec.getRequiredTestClass().getAnnotation(BrokerSettings.class);
        }
        List<String> sets = s == null ? List.of() : Arrays.asList(s.value());
        Path logDir = testLogDir(ec);
        Path data;
        try {
            deleteTree(logDir);
            Files.createDirectories(logDir);
            data = Files.createTempDirectory("doze-jvm-");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        DozeBroker b = new DozeBroker(data, logDir, sets);
        ec.getStore(NS).put("broker", b);
        ec.getStore(NS).put("data", data);
        return b.start();
    }

    @Override
    public void afterEach(ExtensionContext ec) {
        DozeBroker b = ec.getStore(NS).remove("broker", DozeBroker.class);
        Path data = ec.getStore(NS).remove("data", Path.class);
        if (b == null) {
            return;
        }
        b.close();
        if (ec.getExecutionException().isPresent()) {
            System.err.println("=== " + ec.getDisplayName() + " failed; " + b + "; data kept in " + data);
            System.err.println(b.logTail(80));
        } else if (data != null) {
            deleteTree(data);
        }
    }

    static void deleteTree(Path root) {
        if (!Files.exists(root)) {
            return;
        }
        try (Stream<Path> w = Files.walk(root)) {
            w.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // best effort
        }
    }
}
