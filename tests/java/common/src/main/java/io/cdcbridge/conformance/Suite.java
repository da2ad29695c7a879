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

    /**
     * Ends the FAIL line of a call lost to a race inside Apache HttpAsyncClient 4.0.2, which both SDKs bundle: its
     * DefaultClientExchangeHandlerImpl.connectionAllocated hands a pooled connection the request first and asks
     * whether it is open afterwards. When the calling thread is descheduled in between (a loaded machine), the I/O
     * thread sends the call, reads the whole answer and returns the connection to the pool; if the late check runs
     * before that thread completes the call's future, it sees a released connection and fails the call with
     * ConnectionClosedException, although the server applied and answered it.
     */
    public static final String CLIENT_POOL_RACE = " [client race: connectionAllocated]";

    /** The error's line; marked when the race is anywhere in its causes (an expected-error check wraps it). */
    private static String describe(Throwable error) {
        String text = error instanceof AssertionError
                ? error.getMessage()
                : error.getClass().getSimpleName() + ": " + error.getMessage();
        return isClientPoolRace(error) ? text + CLIENT_POOL_RACE : text;
    }

    /** Whether the error is a ConnectionClosedException raised by the client's connectionAllocated itself. */
    static boolean isClientPoolRace(Throwable error) {
        for (Throwable cause = error; cause != null; cause = cause.getCause()) {
            if (cause.getClass().getSimpleName().equals("ConnectionClosedException")) {
                StackTraceElement[] frames = cause.getStackTrace();
                return frames.length > 0 && frames[0].getMethodName().equals("connectionAllocated")
                        && frames[0].getClassName().endsWith(".DefaultClientExchangeHandlerImpl");
            }
        }
        return false;
    }
}
