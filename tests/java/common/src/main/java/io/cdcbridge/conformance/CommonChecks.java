package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.SyncClient;

/**
 * The checks every SDK version runs: the table API, the row API with conditions and limits on one streamed table,
 * and last the stream API over every write made to it (including those of version-specific checks in between).
 */
public final class CommonChecks {
    private final SyncClient client;
    private final Settings settings;
    private final ExpectedStream expected = new ExpectedStream();
    private final Writes writes;
    private final String rowTable;

    public CommonChecks(SyncClient client, Settings settings) {
        this.client = client;
        this.settings = settings;
        this.writes = new Writes(client, expected);
        this.rowTable = settings.table("rows");
    }

    /** The streamed table the row checks write. */
    public String rowTable() {
        return rowTable;
    }

    /** Writes to the row table that the stream checks will expect. */
    public Writes writes() {
        return writes;
    }

    public void runTablesAndRows(Suite suite) {
        new TableApiChecks(client, settings).run(suite);
        suite.check("create-row-table", () -> Tables.create(client, rowTable, true));
        new RowApiChecks(client, rowTable, writes).run(suite);
        new LimitChecks(client, rowTable).run(suite);
    }

    public void runStream(Suite suite) {
        new StreamApiChecks(client, rowTable, writes, expected, new EmulatorAdmin(settings.endpoint())).run(suite);
    }
}
