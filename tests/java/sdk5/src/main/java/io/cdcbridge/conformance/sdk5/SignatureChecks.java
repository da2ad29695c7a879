package io.cdcbridge.conformance.sdk5;

import com.alicloud.openservices.tablestore.SyncClient;
import io.cdcbridge.conformance.Expect;
import io.cdcbridge.conformance.Settings;
import io.cdcbridge.conformance.Suite;

/**
 * Request signatures as the service checks them: V2 and V4 (for the emulator's region) pass; a wrong secret, a V4
 * signature for another region and an STS token the emulator was not configured with get 403 OTSAuthFailed.
 */
final class SignatureChecks {
    private static final String AUTH_FAILED = "OTSAuthFailed";

    private final Settings settings;

    SignatureChecks(Settings settings) {
        this.settings = settings;
    }

    void run(Suite suite) {
        suite.check("signature-v2", () -> listTables(Clients.v2(settings)));
        suite.check("signature-v2-wrong-secret-refused", () -> Expect.serviceError(AUTH_FAILED, 403,
                () -> listTables(Clients.v2WithSecret(settings, "not-the-secret")), "V2 with a wrong secret"));
        suite.check("signature-v4-region", () -> listTables(Clients.v4(settings, settings.region())));
        suite.check("signature-v4-other-region-refused", () -> Expect.serviceError(AUTH_FAILED, 403,
                () -> listTables(Clients.v4(settings, otherRegion())), "V4 for a region the emulator is not in"));
        suite.check("signature-unknown-sts-token-refused", () -> Expect.serviceError(AUTH_FAILED, 403,
                () -> listTables(Clients.v2WithStsToken(settings, "unknown-sts-token")),
                "an STS token the emulator was not configured with"));
    }

    private String otherRegion() {
        return settings.region().equals("cn-shanghai") ? "cn-beijing" : "cn-shanghai";
    }

    private static void listTables(SyncClient client) {
        try {
            client.listTable();
        } finally {
            client.shutdown();
        }
    }
}
