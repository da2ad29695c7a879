package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.model.BatchWriteRowRequest;
import com.alicloud.openservices.tablestore.model.ColumnValue;
import com.alicloud.openservices.tablestore.model.PutRowRequest;
import com.alicloud.openservices.tablestore.model.RowPutChange;

/**
 * Documented limits the service enforces with OTSParameterInvalid (HTTP 400): a STRING value of at most 2 MB, a
 * STRING primary-key value of at most 1 KB, at most 200 rows in one BatchWriteRow. The writes are refused, so they
 * must not reach the stream either.
 */
public final class LimitChecks {
    private static final String INVALID = "OTSParameterInvalid";

    private final SyncClient client;
    private final String table;

    public LimitChecks(SyncClient client, String table) {
        this.client = client;
        this.table = table;
    }

    public void run(Suite suite) {
        suite.check("limit-string-value-3mb-refused", () -> {
            RowPutChange put = new RowPutChange(table, Tables.key("limits", 1))
                    .addColumn("big", ColumnValue.fromString("x".repeat(3 * 1024 * 1024)));
            Expect.serviceError(INVALID, 400, () -> client.putRow(new PutRowRequest(put)), "a 3 MB STRING value");
        });
        suite.check("limit-primary-key-string-over-1kb-refused", () -> {
            RowPutChange put = new RowPutChange(table, Tables.key("k".repeat(1025), 1))
                    .addColumn("v", ColumnValue.fromLong(1));
            Expect.serviceError(INVALID, 400, () -> client.putRow(new PutRowRequest(put)),
                    "a 1025-byte STRING primary-key value");
        });
        suite.check("limit-batch-write-over-200-rows-refused", () -> {
            BatchWriteRowRequest request = new BatchWriteRowRequest();
            for (int n = 0; n < 201; n++) {
                request.addRowChange(new RowPutChange(table, Tables.key("limits", 100 + n))
                        .addColumn("v", ColumnValue.fromLong(n)));
            }
            Expect.serviceError(INVALID, 400, () -> client.batchWriteRow(request), "a BatchWriteRow of 201 rows");
        });
    }
}
