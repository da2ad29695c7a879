package io.cdcbridge.conformance.sdk5;

import com.alicloud.openservices.tablestore.ClientConfiguration;
import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.model.NoRetryStrategy;
import io.cdcbridge.conformance.EmulatorAdmin;
import io.cdcbridge.conformance.Expect;
import io.cdcbridge.conformance.Settings;
import io.cdcbridge.conformance.Suite;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Throttling and busy answers injected through the emulator's fault rules reach the Java SDK with the service's
 * code and HTTP status, and the SDK's default retry policy recovers from a passing OTSServerBusy.
 */
final class ThrottlingChecks {
    /** The codes and the HTTP statuses the service documents for them. */
    private static final Map<String, Integer> STATUS_BY_CODE = new LinkedHashMap<>();

    static {
        STATUS_BY_CODE.put("OTSFlowControl", 429);
        STATUS_BY_CODE.put("OTSServerBusy", 503);
        STATUS_BY_CODE.put("OTSPartitionUnavailable", 503);
        STATUS_BY_CODE.put("OTSTimeout", 503);
        STATUS_BY_CODE.put("OTSQuotaExhausted", 403);
        STATUS_BY_CODE.put("OTSCapacityUnitExhausted", 403);
    }

    private final Settings settings;
    private final EmulatorAdmin admin;

    ThrottlingChecks(Settings settings) {
        this.settings = settings;
        this.admin = new EmulatorAdmin(settings.endpoint());
    }

    void run(Suite suite) {
        for (Map.Entry<String, Integer> entry : STATUS_BY_CODE.entrySet()) {
            suite.check("fault-" + entry.getKey() + "-reaches-the-sdk", () -> {
                ClientConfiguration noRetries = Clients.configuration();
                noRetries.setRetryStrategy(new NoRetryStrategy());
                SyncClient client = new SyncClient(settings.endpoint(), settings.accessKeyId(),
                        settings.accessKeySecret(), settings.instance(), noRetries);
                try {
                    admin.failNext("ListTable", entry.getKey(), 1);
                    Expect.serviceError(entry.getKey(), entry.getValue(), client::listTable,
                            "ListTable answered with an injected " + entry.getKey());
                } finally {
                    admin.clearFaults();
                    client.shutdown();
                }
            });
        }
        suite.check("sdk-default-retry-recovers-from-server-busy", () -> {
            SyncClient client = Clients.v2(settings);
            try {
                admin.failNext("ListTable", "OTSServerBusy", 1);
                client.listTable();
            } finally {
                admin.clearFaults();
                client.shutdown();
            }
        });
    }
}
