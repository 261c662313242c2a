package dev.doze.jvm;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Collectors;

/**
 * The crash tests' driver: a child JVM works through a job (copies or
 * processes records) while the schedule SIGKILLs the broker (and restarts it)
 * or the child (and starts a new one) as soon as the job's progress reaches
 * each kill's point. A child that exits on its own is started again, up to a
 * limit. {@link #run} returns once the job is done and every kill has happened,
 * and fails when the time budget is spent.
 */
final class KillSchedule {
    enum Target { BROKER, CHILD }

    /** Kill the target once the job's progress is at least {@code at}. */
    record Kill(long at, Target target) {
    }

    static Kill broker(long at) {
        return new Kill(at, Target.BROKER);
    }

    static Kill child(long at) {
        return new Kill(at, Target.CHILD);
    }

    /** The child's job as the test sees it. */
    interface Job {
        /** The progress so far (e.g. records committed), after waiting briefly for more. */
        long progress() throws Exception;

        /** The job is complete (checked after {@link #progress()}). */
        boolean done();

        /** The progress for failure messages and the kills' events. */
        String status();

        /** A due kill of the child waits until this holds (e.g. the new child is at work). */
        default boolean childKillable() {
            return true;
        }

        /**
         * Whether a kill that is due once the job is done fails the run (the job
         * went too fast for the schedule); otherwise such a kill still happens.
         */
        default boolean killAfterDoneFails() {
            return false;
        }

        /** Between the child's SIGKILL and its successor's start; the result is added to the kill's event. */
        default String afterChildKill() throws Exception {
            return "";
        }
    }

    private final DozeBroker broker;
    private final ChildJvm child;
    private final Duration budget;
    private final int maxUnplannedExits;
    private final List<Kill> pending;
    /** The kills done, as they happened. */
    final List<String> events = new ArrayList<>();
    /** The child's exits on its own. */
    final List<String> unplanned = new ArrayList<>();

    KillSchedule(DozeBroker broker, ChildJvm child, Duration budget, int maxUnplannedExits, List<Kill> kills) {
        this.broker = broker;
        this.child = child;
        this.budget = budget;
        this.maxUnplannedExits = maxUnplannedExits;
        this.pending = new ArrayList<>(kills);
    }

    private String name(Target target) {
        return target == Target.BROKER ? "broker" : child.name();
    }

    /** Spawns the child and runs the schedule to the end; returns the seconds that took. */
    double run(Job job) throws Exception {
        long t0 = System.nanoTime();
        child.spawn();
        while (true) {
            double elapsed = (System.nanoTime() - t0) / 1e9;
            assertTrue(elapsed < budget.toSeconds(), child.name() + " not done after " + budget + ": "
                    + job.status() + ", events " + events + ", unplanned exits " + unplanned + "\n"
                    + child.logTail(40));
            long progress = job.progress();
            if (job.done() && pending.isEmpty()) {
                return (System.nanoTime() - t0) / 1e9;
            }
            if (!child.alive()) {
                int rc = child.exitValue();
                assertFalse(rc == 0 && job.done(), child.name() + " finished before kill points "
                        + pending.stream().map(k -> k.at() + " " + name(k.target())).collect(Collectors.toList())
                        + " (events " + events + "): it works too fast for this schedule");
                unplanned.add(String.format("t=%.1fs rc=%d progress=%d log=%s", elapsed, rc, progress,
                        child.logPath()));
                assertTrue(unplanned.size() <= maxUnplannedExits, "the " + child.name() + " exited on its own "
                        + unplanned.size() + " times: " + unplanned + "\n" + child.logTail(60));
                child.spawn();
                continue;
            }
            Kill next = pending.isEmpty() ? null : pending.get(0);
            if (next != null && progress >= next.at()
                    && (next.target() == Target.BROKER || job.childKillable())) {
                assertFalse(job.killAfterDoneFails() && job.done(), child.name() + " finished before the "
                        + name(next.target()) + " kill (events " + events + "): it works too fast for this schedule");
                Thread.sleep(37); // inside a transaction rather than on its edge
                pending.remove(0);
                String event = String.format("%s kill at %d (%s, t=%.1fs, %s)", name(next.target()), next.at(),
                        job.status(), elapsed, child);
                if (next.target() == Target.CHILD) {
                    child.kill9();
                    event += job.afterChildKill();
                    child.spawn();
                } else {
                    broker.kill9();
                    broker.start();
                }
                events.add(event);
            }
        }
    }
}
