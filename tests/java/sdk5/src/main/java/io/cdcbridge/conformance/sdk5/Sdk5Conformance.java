package io.cdcbridge.conformance.sdk5;

import com.alicloud.openservices.tablestore.SyncClient;
import io.cdcbridge.conformance.CommonChecks;
import io.cdcbridge.conformance.Settings;
import io.cdcbridge.conformance.Suite;

/** The emulator judged by the official SDK 5.x: exit 0 when every check passed (settings: see {@link Settings}). */
public final class Sdk5Conformance {
    private Sdk5Conformance() {}

    public static void main(String[] args) {
        Settings settings = Settings.fromEnvironment();
        Suite suite = new Suite("sdk5");
        SyncClient client = Clients.v2(settings);
        int exit;
        try {
            CommonChecks common = new CommonChecks(client, settings);
            common.runTablesAndRows(suite);
            new Sdk5OnlyChecks(client, settings, common.rowTable(), common.writes()).run(suite);
            new SignatureChecks(settings).run(suite);
            new ThrottlingChecks(settings).run(suite);
            common.runStream(suite);
        } finally {
            exit = suite.finish();
            client.shutdown();
        }
        System.exit(exit);
    }
}
