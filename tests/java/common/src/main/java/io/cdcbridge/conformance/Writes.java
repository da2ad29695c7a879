package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.model.BatchWriteRowRequest;
import com.alicloud.openservices.tablestore.model.BatchWriteRowResponse;
import com.alicloud.openservices.tablestore.model.ColumnValue;
import com.alicloud.openservices.tablestore.model.DeleteRowRequest;
import com.alicloud.openservices.tablestore.model.PutRowRequest;
import com.alicloud.openservices.tablestore.model.RowChange;
import com.alicloud.openservices.tablestore.model.RowDeleteChange;
import com.alicloud.openservices.tablestore.model.RowPutChange;
import com.alicloud.openservices.tablestore.model.RowUpdateChange;
import com.alicloud.openservices.tablestore.model.UpdateRowRequest;
import com.alicloud.openservices.tablestore.model.UpdateRowResponse;
import java.util.List;
import java.util.Map;

/** The row writes of the suite, each noted in the expected stream once the service acknowledged it. */
public final class Writes {
    private final SyncClient client;
    private final ExpectedStream expected;

    public Writes(SyncClient client, ExpectedStream expected) {
        this.client = client;
        this.expected = expected;
    }

    public void put(RowPutChange change) {
        client.putRow(new PutRowRequest(change));
        expected.put(change);
    }

    public UpdateRowResponse update(RowUpdateChange change) {
        UpdateRowResponse response = client.updateRow(new UpdateRowRequest(change));
        expected.update(change, Map.of());
        return response;
    }

    /** An update whose incremented columns had, after the write, the values `incremented`. */
    public UpdateRowResponse update(RowUpdateChange change, Map<String, ColumnValue> incremented) {
        UpdateRowResponse response = client.updateRow(new UpdateRowRequest(change));
        expected.update(change, incremented);
        return response;
    }

    public void delete(RowDeleteChange change) {
        client.deleteRow(new DeleteRowRequest(change));
        expected.delete(change.getPrimaryKey());
    }

    /** A batch whose rows must all succeed (a row-level failure fails the check). */
    public BatchWriteRowResponse batch(List<RowChange> changes) {
        BatchWriteRowRequest request = new BatchWriteRowRequest();
        changes.forEach(request::addRowChange);
        BatchWriteRowResponse response = client.batchWriteRow(request);
        Expect.isTrue(response.isAllSucceed(), "BatchWriteRow: every row succeeds; failed: "
                + response.getFailedRows().size());
        for (RowChange change : changes) {
            if (change instanceof RowPutChange put) {
                expected.put(put);
            } else if (change instanceof RowUpdateChange update) {
                expected.update(update, Map.of());
            } else {
                expected.delete(change.getPrimaryKey());
            }
        }
        return response;
    }
}
