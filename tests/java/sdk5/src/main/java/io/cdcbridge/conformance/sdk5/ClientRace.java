package io.cdcbridge.conformance.sdk5;

import com.alicloud.openservices.tablestore.SyncClient;
import io.cdcbridge.conformance.Expect;
import io.cdcbridge.conformance.Settings;
import io.cdcbridge.conformance.Suite;
import io.cdcbridge.conformance.Tables;

/**
 * One CreateTable on a pooled connection, after the call that opened it and before a ListTable, for the test that
 * holds the SDK's threads in a debugger inside the HTTP client's connectionAllocated race (see
 * {@link Suite#CLIENT_POOL_RACE}). Prints the tables the emulator lists afterwards, so the test sees that the failed
 * call was applied. With the argument {@code expected-error} the first call creates the table and the raced one is a
 * check that its second creation is refused, so the race reaches the suite wrapped in that check's AssertionError.
 */
public final class ClientRace {
    private ClientRace() {}

    public static void main(String[] args) {
        Settings settings = Settings.fromEnvironment();
        SyncClient client = Clients.v2(settings);
        String table = settings.table("race");
        Suite suite = new Suite("race");
        int exit;
        boolean expectedError = args.length > 0 && args[0].equals("expected-error");
        try {
            if (expectedError) {
                Tables.create(client, table, false);
                suite.check("create-existing-table-refused", () -> Expect.serviceError("OTSObjectAlreadyExist", 409,
                        () -> Tables.create(client, table, false), "CreateTable of an existing table"));
            } else {
                client.listTable();
                suite.check("create-table", () -> Tables.create(client, table, false));
            }
            System.out.println("TABLES " + client.listTable().getTableNames());
        } finally {
            exit = suite.finish();
            client.shutdown();
        }
        System.exit(exit);
    }
}
