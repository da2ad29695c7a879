package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.TableStoreException;
import java.util.Objects;

/** The few assertions the checks need, with messages that say what was expected of the emulator. */
public final class Expect {
    private Expect() {}

    public static void equal(Object expected, Object actual, String what) {
        if (!Objects.equals(expected, actual)) {
            throw new AssertionError(what + ": expected " + expected + ", got " + actual);
        }
    }

    public static void isTrue(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    /** `call` must fail with the service error `code` (and `httpStatus` unless it is 0); the error it raised. */
    public static TableStoreException serviceError(String code, int httpStatus, Suite.Check call, String what) {
        try {
            call.run();
        } catch (TableStoreException error) {
            equal(code, error.getErrorCode(), what + " (error code; message: " + error.getMessage() + ")");
            if (httpStatus != 0) {
                equal(httpStatus, error.getHttpStatus(), what + " (HTTP status)");
            }
            return error;
        } catch (Exception error) {
            throw new AssertionError(what + ": expected service error " + code + ", got " + error, error);
        }
        throw new AssertionError(what + ": expected service error " + code + ", but the call succeeded");
    }
}
