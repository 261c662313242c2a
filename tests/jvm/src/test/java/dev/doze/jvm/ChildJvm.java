package dev.doze.jvm;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A main class of the test classpath run in a JVM of its own, so that a test
 * can SIGKILL it: one run at a time, a new run ({@link #spawn()}) after each
 * kill or exit. Run N of the child named NAME has its files in the test's log
 * dir: NAME-N.out (stdout, each line prefixed with the test JVM's
 * {@code System.nanoTime()} in ms), NAME-N.err (stderr: its own lines and stack
 * traces) and NAME-N.log (the clients' slf4j log). A subclass follows what the
 * child prints (progress lines) in {@link #onStdout}.
 */
class ChildJvm {
    private static final Path SETPRIV = Path.of("/usr/bin/setpriv");

    private final Path logDir;
    private final String name;
    private final Class<?> main;
    private final List<String> args;
    private volatile Process proc;
    private volatile int runs;

    ChildJvm(Path logDir, String name, Class<?> main, List<String> args) {
        this.logDir = logDir;
        this.name = name;
        this.main = main;
        this.args = List.copyOf(args);
    }

    /** The prefix of its files, and what the kill schedule calls it. */
    String name() {
        return name;
    }

    /** How many runs were started; the current one is this number. */
    int runs() {
        return runs;
    }

    /** A file of run {@code run}: suffix .out, .err or .log. */
    Path file(int run, String suffix) {
        return logDir.resolve(name + "-" + run + suffix);
    }

    /** The current run's slf4j log. */
    Path logPath() {
        return file(runs, ".log");
    }

    /** Starts the next run (the previous one is dead or killed by now). */
    void spawn() throws IOException {
        int run = ++runs;
        String java = ProcessHandle.current().info().command().orElse("java");
        List<String> cmd = new ArrayList<>();
        if (Files.isExecutable(SETPRIV)) {
            // Dies with the thread that spawned it (the JUnit thread) if the test JVM is SIGKILLed.
            cmd.addAll(List.of(SETPRIV.toString(), "--pdeathsig", "KILL", "--"));
        }
        cmd.addAll(List.of(java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                "-cp", System.getProperty("java.class.path"),
                "-Dorg.slf4j.simpleLogger.logFile=" + file(run, ".log"),
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                main.getName()));
        cmd.addAll(args);
        Process p = new ProcessBuilder(cmd)
                .redirectError(ProcessBuilder.Redirect.appendTo(file(run, ".err").toFile()))
                .start();
        proc = p;
        Thread t = new Thread(() -> follow(p, run), name + "-" + run + "-stdout");
        t.setDaemon(true);
        t.start();
    }

    private void follow(Process p, int run) {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(),
                StandardCharsets.UTF_8));
             PrintWriter w = new PrintWriter(Files.newBufferedWriter(file(run, ".out")))) {
            String line;
            while ((line = r.readLine()) != null) {
                w.println(System.nanoTime() / 1_000_000 + " " + line);
                w.flush();
                onStdout(run, line);
            }
        } catch (IOException e) {
            // Process.destroy() closes the pipe under a live reader: the end of its output.
        }
    }

    /**
     * Each line the child prints on stdout, on a reader thread of run {@code run}
     * (the reader of a dead run may still be draining its last lines while the
     * next run starts: compare {@code run} with {@link #runs()}).
     */
    protected void onStdout(int run, String line) {
    }

    boolean alive() {
        return proc.isAlive();
    }

    int exitValue() {
        return proc.exitValue();
    }

    boolean waitFor(Duration timeout) throws InterruptedException {
        return proc.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS);
    }

    /** SIGKILL (the current run, if it is alive) and wait for it to be gone. */
    void kill9() {
        Process p = proc;
        if (p != null && p.isAlive()) {
            p.destroyForcibly();
            DozeBroker.waitFor(p, Duration.ofSeconds(10));
        }
    }

    /** SIGTERM and wait; the exit status, or -1 (after a SIGKILL) if it did not exit in time. */
    int stop(Duration timeout) {
        proc.destroy();
        if (!DozeBroker.waitFor(proc, timeout)) {
            kill9();
            return -1;
        }
        return proc.exitValue();
    }

    /** For failure messages: the last lines of the last runs' stderr and slf4j logs. */
    String logTail(int lines) {
        return logTail(2, lines, ".err", ".log");
    }

    /** The last {@code lines} lines of the files with these suffixes of the last {@code lastRuns} runs. */
    String logTail(int lastRuns, int lines, String... suffixes) {
        StringBuilder sb = new StringBuilder();
        for (int i = Math.max(1, runs - lastRuns + 1); i <= runs; i++) {
            for (String suffix : suffixes) {
                Path p = file(i, suffix);
                try {
                    List<String> all = Files.exists(p) ? Files.readAllLines(p) : List.of();
                    sb.append("--- ").append(p).append(" ---\n");
                    all.subList(Math.max(0, all.size() - lines), all.size()).forEach(l -> sb.append(l).append('\n'));
                } catch (IOException e) {
                    sb.append("(unreadable: ").append(e).append(")\n");
                }
            }
        }
        return sb.toString();
    }

    @Override
    public String toString() {
        return name + "-" + runs;
    }
}
