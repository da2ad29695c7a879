package io.cdcbridge.conformance.sdk4;

import com.alicloud.openservices.tablestore.SyncClient;
import io.cdcbridge.conformance.CommonChecks;
import io.cdcbridge.conformance.Settings;
import io.cdcbridge.conformance.Suite;

/**
 * The emulator judged by SDK 4.3.1, the version tablestore-streamclient 1.0.0 declares: the checks every version
 * runs (4.x parses DescribeTable strictly: its table_status is required there).
 */
public final class Sdk4Conformance {
    private Sdk4Conformance() {}

    public static void main(String[] args) {
        Settings settings = Settings.fromEnvironment();
        Suite suite = new Suite("sdk4");
        SyncClient client = new SyncClient(settings.endpoint(), settings.accessKeyId(), settings.accessKeySecret(),
                settings.instance());
        int exit;
        try {
            CommonChecks common = new CommonChecks(client, settings);
            common.runTablesAndRows(suite);
            common.runStream(suite);
        } finally {
            exit = suite.finish();
            client.shutdown();
        }
        System.exit(exit);
    }
}
