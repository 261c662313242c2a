package dev.doze.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * One doze-kafka broker process (and its successors after restarts) on a free
 * loopback port with its own data directory, like tests/conftest.py's Broker.
 *
 * <p>{@link #kill9()} is SIGKILL ({@link Process#destroyForcibly()} on Linux),
 * {@link #stop()} is SIGTERM, {@link #start()} (again) reuses the port and the
 * data directory. Each generation logs (stdout and stderr) to its own file under
 * {@code target/doze-logs/<test>/}. Every wait is bounded.
 */
public final class DozeBroker implements AutoCloseable {
    public static final String READY_LINE = "doze-kafka listening on";
    static final Duration READY_TIMEOUT = Duration.ofSeconds(30);
    static final Duration STOP_TIMEOUT = Duration.ofSeconds(30);
    private static final Path SETPRIV = Path.of("/usr/bin/setpriv");
    private static final List<DozeBroker> LIVE = new ArrayList<>();

    static {
        // A JVM that exits (normally, on SIGTERM, or when surefire gives up on
        // it) takes its brokers along; setpriv --pdeathsig covers a SIGKILLed JVM.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            synchronized (LIVE) {
                for (DozeBroker b : LIVE) {
                    b.destroyQuietly();
                }
            }
        }, "doze-broker-reaper"));
    }

    private final Path binary;
    private final Path dataDir;
    private final Path logDir;
    private final int port;
    private final List<String> sets;
    private final List<Path> logPaths = new ArrayList<>();
    private Process proc;
    private int generation;

    public DozeBroker(Path dataDir, Path logDir, List<String> sets) {
        this.binary = binary();
        this.dataDir = dataDir;
        this.logDir = logDir;
        this.port = freePort();
        this.sets = List.copyOf(sets);
    }

    /** The binary: $DOZE_KAFKA_BIN, else -Ddoze.bin, else ../../target/release/doze-kafka. */
    public static Path binary() {
        String env = System.getenv("DOZE_KAFKA_BIN");
        String prop = System.getProperty("doze.bin");
        Path p = Path.of(env != null && !env.isEmpty() ? env
                : prop != null ? prop : "../../target/release/doze-kafka").toAbsolutePath().normalize();
        if (!Files.isExecutable(p)) {
            throw new IllegalStateException("broker binary " + p + " not found or not executable "
                    + "(build it with `cargo build --release -p doze-net`, or set DOZE_KAFKA_BIN)");
        }
        return p;
    }

    static int freePort() {
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(false);
            s.bind(new InetSocketAddress("127.0.0.1", 0));
            return s.getLocalPort();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public String bootstrap() {
        return "127.0.0.1:" + port;
    }

    public int port() {
        return port;
    }

    public Path logDir() {
        return logDir;
    }

    public long pid() {
        return proc == null ? -1 : proc.pid();
    }

    public synchronized boolean running() {
        return proc != null && proc.isAlive();
    }

    private List<String> command() {
        List<String> cmd = new ArrayList<>();
        if (Files.isExecutable(SETPRIV)) {
            // Dies with the thread that spawned it (the JUnit thread) if the JVM is SIGKILLed.
            cmd.addAll(List.of(SETPRIV.toString(), "--pdeathsig", "KILL", "--"));
        }
        cmd.addAll(List.of(binary.toString(), "--listen", bootstrap(), "--data-dir", dataDir.toString()));
        // No console: brokers run side by side, and all would want port 8092.
        cmd.addAll(List.of("--set", "doze.console.listen=none"));
        for (String s : sets) {
            cmd.add("--set");
            cmd.add(s);
        }
        return cmd;
    }

    /** Starts (or restarts) on the same port and data dir; returns once it listens. */
    public synchronized DozeBroker start() {
        if (running()) {
            throw new IllegalStateException("broker already running (pid " + proc.pid() + ")");
        }
        try {
            Files.createDirectories(dataDir);
            Files.createDirectories(logDir);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        // After a kill the old socket may linger briefly: retry a few times.
        int attempts = 5;
        for (int i = 0; ; i++) {
            try {
                spawn();
                return this;
            } catch (BrokerStartException e) {
                if (i == attempts - 1 || generation == 1) {
                    throw e;
                }
                sleep(500);
            }
        }
    }

    private void spawn() {
        generation++;
        Path log = logDir.resolve("broker-" + port + "-" + generation + ".log");
        logPaths.add(log);
        ProcessBuilder pb = new ProcessBuilder(command())
                .redirectInput(ProcessBuilder.Redirect.from(Path.of("/dev/null").toFile()))
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
        pb.environment().putIfAbsent("RUST_BACKTRACE", "1");
        Process p;
        try {
            p = pb.start();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot start " + command(), e);
        }
        synchronized (LIVE) {
            LIVE.add(this);
        }
        long deadline = System.nanoTime() + READY_TIMEOUT.toNanos();
        while (System.nanoTime() < deadline) {
            if (readText(log).contains(READY_LINE)) {
                proc = p;
                return;
            }
            if (!p.isAlive()) {
                throw new BrokerStartException("doze-kafka exited with " + p.exitValue()
                        + " before listening (" + command() + "):\n" + logTail(60));
            }
            sleep(20);
        }
        p.destroyForcibly();
        waitFor(p, Duration.ofSeconds(10));
        throw new BrokerStartException("doze-kafka did not print '" + READY_LINE + "' within "
                + READY_TIMEOUT + " (" + command() + "):\n" + logTail(60));
    }

    /** SIGKILL: nothing that is not on disk survives. Returns the exit status. */
    public synchronized int kill9() {
        if (!running()) {
            throw new IllegalStateException("kill9 on a broker that is not running");
        }
        proc.destroyForcibly();
        if (!waitFor(proc, STOP_TIMEOUT)) {
            throw new IllegalStateException("doze-kafka pid " + proc.pid() + " survived SIGKILL for " + STOP_TIMEOUT);
        }
        return proc.exitValue();
    }

    /** SIGTERM and wait; returns the exit status (SIGKILLs and throws on timeout). */
    public synchronized int stop() {
        if (!running()) {
            return proc == null ? 0 : proc.exitValue();
        }
        proc.destroy();
        if (!waitFor(proc, STOP_TIMEOUT)) {
            proc.destroyForcibly();
            waitFor(proc, Duration.ofSeconds(10));
            throw new AssertionError("doze-kafka ignored SIGTERM for " + STOP_TIMEOUT + ":\n" + logTail(60));
        }
        return proc.exitValue();
    }

    /** kill -9 then start again on the same port and data dir. */
    public DozeBroker restartAfterKill9() {
        kill9();
        return start();
    }

    @Override
    public synchronized void close() {
        try {
            if (running()) {
                stop();
            }
        } catch (AssertionError e) {
            // already SIGKILLed by stop()
        } finally {
            synchronized (LIVE) {
                LIVE.remove(this);
            }
        }
    }

    private void destroyQuietly() {
        Process p = proc;
        if (p != null && p.isAlive()) {
            p.destroyForcibly();
        }
    }

    /** The last {@code lines} lines of every generation's log. */
    public String logTail(int lines) {
        StringBuilder sb = new StringBuilder();
        for (Path p : logPaths) {
            List<String> all = readText(p).lines().toList();
            sb.append("--- ").append(p).append(" (last ").append(lines).append(" of ").append(all.size())
                    .append(" lines) ---\n");
            for (String l : all.subList(Math.max(0, all.size() - lines), all.size())) {
                sb.append(l).append('\n');
            }
        }
        return sb.toString();
    }

    public List<Path> logPaths() {
        return List.copyOf(logPaths);
    }

    private static String readText(Path p) {
        try {
            return Files.exists(p) ? new String(Files.readAllBytes(p), StandardCharsets.UTF_8) : "";
        } catch (IOException e) {
            return "";
        }
    }

    static boolean waitFor(Process p, Duration d) {
        try {
            return p.waitFor(d.toMillis(), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    @Override
    public String toString() {
        return "doze-kafka " + bootstrap() + " (generation " + generation + ", data " + dataDir + ")";
    }

    public static final class BrokerStartException extends RuntimeException {
        BrokerStartException(String msg) {
            super(msg);
        }
    }
}
