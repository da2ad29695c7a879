package io.cdcbridge.conformance;

import java.util.ArrayList;
import java.util.List;

/**
 * One run of named checks. Each check runs alone: a failure is printed with its message and the run goes on, so one
 * gap of the emulator does not hide the others. The closing line is "N passed, N failed" (what CI and pytest read).
 */
public final class Suite {
    /** A check: returns normally when the emulator behaved, throws (AssertionError or the client's error) when not. */
    @FunctionalInterface
    public interface Check {
        void run() throws Exception;
    }

    private final String name;
    private final List<String> failures = new ArrayList<>();
    private int passed;

    public Suite(String name) {
        this.name = name;
    }

    public void check(String checkName, Check check) {
        try {
            check.run();
            passed++;
            System.out.println("PASS " + name + "/" + checkName);
        } catch (Throwable error) {
            String line = "FAIL " + name + "/" + checkName + ": " + describe(error);
            failures.add(line);
            System.out.println(line);
            error.printStackTrace(System.err);
        }
        System.out.flush();
    }

    /** Print the summary; the process exit code (0 when every check passed). */
    public int finish() {
        System.out.println(name + ": " + passed + " passed, " + failures.size() + " failed");
        System.out.flush();
        return failures.isEmpty() ? 0 : 1;
    }

    private static String describe(Throwable error) {
        if (error instanceof AssertionError) {
            return error.getMessage();
        }
        return error.getClass().getSimpleName() + ": " + error.getMessage();
    }
}
