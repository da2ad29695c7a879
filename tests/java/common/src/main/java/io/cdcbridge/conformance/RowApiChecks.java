package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.model.BatchGetRowRequest;
import com.alicloud.openservices.tablestore.model.BatchGetRowResponse;
import com.alicloud.openservices.tablestore.model.Column;
import com.alicloud.openservices.tablestore.model.ColumnValue;
import com.alicloud.openservices.tablestore.model.Condition;
import com.alicloud.openservices.tablestore.model.Direction;
import com.alicloud.openservices.tablestore.model.GetRangeRequest;
import com.alicloud.openservices.tablestore.model.GetRangeResponse;
import com.alicloud.openservices.tablestore.model.GetRowRequest;
import com.alicloud.openservices.tablestore.model.MultiRowQueryCriteria;
import com.alicloud.openservices.tablestore.model.PrimaryKey;
import com.alicloud.openservices.tablestore.model.RangeRowQueryCriteria;
import com.alicloud.openservices.tablestore.model.Row;
import com.alicloud.openservices.tablestore.model.RowChange;
import com.alicloud.openservices.tablestore.model.RowDeleteChange;
import com.alicloud.openservices.tablestore.model.RowExistenceExpectation;
import com.alicloud.openservices.tablestore.model.RowPutChange;
import com.alicloud.openservices.tablestore.model.RowUpdateChange;
import com.alicloud.openservices.tablestore.model.SingleRowQueryCriteria;
import com.alicloud.openservices.tablestore.model.condition.ColumnCondition;
import com.alicloud.openservices.tablestore.model.condition.CompositeColumnValueCondition;
import com.alicloud.openservices.tablestore.model.condition.SingleColumnValueCondition;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * PutRow, GetRow, UpdateRow, DeleteRow, BatchWriteRow, BatchGetRow and GetRange on one streamed table, with row
 * existence and column conditions. Every acknowledged write goes to `expected`; the stream checks compare later.
 */
public final class RowApiChecks {
    private static final String CONDITION_FAILED = "OTSConditionCheckFail";

    private final SyncClient client;
    private final String table;
    private final Writes writes;

    public RowApiChecks(SyncClient client, String table, Writes writes) {
        this.client = client;
        this.table = table;
        this.writes = writes;
    }

    public void run(Suite suite) {
        suite.check("put-get-every-type", this::putGetEveryType);
        suite.check("update-put-delete-columns", this::updateColumns);
        suite.check("delete-row", this::deleteRow);
        suite.check("condition-row-existence", this::rowExistence);
        suite.check("condition-single-column", this::singleColumnCondition);
        suite.check("condition-composite-columns", this::compositeCondition);
        suite.check("batch-write-and-get", this::batchWriteAndGet);
        suite.check("get-range-paged-both-directions", this::getRange);
    }

    private Row get(PrimaryKey key) {
        SingleRowQueryCriteria criteria = new SingleRowQueryCriteria(table, key);
        criteria.setMaxVersions(1);
        return client.getRow(new GetRowRequest(criteria)).getRow();
    }

    private static Condition expecting(RowExistenceExpectation existence) {
        return new Condition(existence);
    }

    private static Condition ignoringRowIf(ColumnCondition columns) {
        Condition condition = new Condition(RowExistenceExpectation.IGNORE);
        condition.setColumnCondition(columns);
        return condition;
    }

    private void putGetEveryType() {
        PrimaryKey key = Tables.key("types", 1);
        RowPutChange put = new RowPutChange(table, key)
                .addColumn("s", ColumnValue.fromString("text é"))
                .addColumn("i", ColumnValue.fromLong(-42))
                .addColumn("b", ColumnValue.fromBoolean(true))
                .addColumn("d", ColumnValue.fromDouble(2.5))
                .addColumn("bin", ColumnValue.fromBinary("bytes".getBytes(StandardCharsets.UTF_8)));
        writes.put(put);
        Row row = get(key);
        Expect.isTrue(row != null, "GetRow after PutRow returns the row");
        Expect.equal(Describe.key(key), Describe.key(row.getPrimaryKey()), "GetRow's primary key");
        for (Column column : put.getColumnsToPut()) {
            Expect.isTrue(row.getLatestColumn(column.getName()) != null, "GetRow returns column " + column.getName());
            Expect.equal(Describe.value(column.getValue()),
                    Describe.value(row.getLatestColumn(column.getName()).getValue()), "column " + column.getName());
        }
    }

    private void updateColumns() {
        PrimaryKey key = Tables.key("update", 1);
        writes.put(new RowPutChange(table, key)
                .addColumn("keep", ColumnValue.fromString("old"))
                .addColumn("drop_all", ColumnValue.fromLong(1))
                .addColumn("drop_one", ColumnValue.fromLong(2)));
        long version = get(key).getLatestColumn("drop_one").getTimestamp();
        RowUpdateChange update = new RowUpdateChange(table, key);
        update.put("keep", ColumnValue.fromString("new"));
        update.put("added", ColumnValue.fromDouble(1.25));
        update.deleteColumns("drop_all");
        update.deleteColumn("drop_one", version);
        writes.update(update);
        Row row = get(key);
        Expect.equal("STRING:new", Describe.value(row.getLatestColumn("keep").getValue()), "updated column");
        Expect.equal("DOUBLE:1.25", Describe.value(row.getLatestColumn("added").getValue()), "added column");
        Expect.isTrue(row.getLatestColumn("drop_all") == null, "every version of drop_all deleted");
        Expect.isTrue(row.getLatestColumn("drop_one") == null, "the one version of drop_one deleted");
    }

    private void deleteRow() {
        PrimaryKey key = Tables.key("delete", 1);
        writes.put(new RowPutChange(table, key).addColumn("v", ColumnValue.fromLong(1)));
        writes.delete(new RowDeleteChange(table, key));
        Expect.isTrue(get(key) == null, "GetRow after DeleteRow returns no row");
    }

    private void rowExistence() {
        PrimaryKey key = Tables.key("exists", 1);
        RowPutChange first = new RowPutChange(table, key).addColumn("v", ColumnValue.fromLong(1));
        first.setCondition(expecting(RowExistenceExpectation.EXPECT_NOT_EXIST));
        writes.put(first);
        RowPutChange again = new RowPutChange(table, key).addColumn("v", ColumnValue.fromLong(2));
        again.setCondition(expecting(RowExistenceExpectation.EXPECT_NOT_EXIST));
        Expect.serviceError(CONDITION_FAILED, 403, () -> writes.put(again), "PutRow EXPECT_NOT_EXIST on a row");
        Expect.equal("INTEGER:1", Describe.value(get(key).getLatestColumn("v").getValue()),
                "a refused PutRow leaves the row");
        RowUpdateChange missingUpdate = new RowUpdateChange(table, Tables.key("missing", 1));
        missingUpdate.put("v", ColumnValue.fromLong(1));
        missingUpdate.setCondition(expecting(RowExistenceExpectation.EXPECT_EXIST));
        Expect.serviceError(CONDITION_FAILED, 403, () -> writes.update(missingUpdate),
                "UpdateRow EXPECT_EXIST on no row");
        Expect.isTrue(get(Tables.key("missing", 1)) == null, "a refused UpdateRow creates no row");
        RowDeleteChange missingDelete = new RowDeleteChange(table, Tables.key("missing", 1));
        missingDelete.setCondition(expecting(RowExistenceExpectation.EXPECT_EXIST));
        Expect.serviceError(CONDITION_FAILED, 403, () -> writes.delete(missingDelete),
                "DeleteRow EXPECT_EXIST on no row");
        RowUpdateChange present = new RowUpdateChange(table, key);
        present.put("v", ColumnValue.fromLong(3));
        present.setCondition(expecting(RowExistenceExpectation.EXPECT_EXIST));
        writes.update(present);
        Expect.equal("INTEGER:3", Describe.value(get(key).getLatestColumn("v").getValue()),
                "UpdateRow EXPECT_EXIST on a row applies");
    }

    private void singleColumnCondition() {
        PrimaryKey key = Tables.key("single", 1);
        writes.put(new RowPutChange(table, key).addColumn("status", ColumnValue.fromString("new")));
        RowUpdateChange wrong = new RowUpdateChange(table, key);
        wrong.put("status", ColumnValue.fromString("done"));
        wrong.setCondition(ignoringRowIf(new SingleColumnValueCondition("status",
                SingleColumnValueCondition.CompareOperator.EQUAL, ColumnValue.fromString("old"))));
        Expect.serviceError(CONDITION_FAILED, 403, () -> writes.update(wrong), "UpdateRow if status == old");
        RowUpdateChange right = new RowUpdateChange(table, key);
        right.put("status", ColumnValue.fromString("done"));
        right.setCondition(ignoringRowIf(new SingleColumnValueCondition("status",
                SingleColumnValueCondition.CompareOperator.EQUAL, ColumnValue.fromString("new"))));
        writes.update(right);
        Expect.equal("STRING:done", Describe.value(get(key).getLatestColumn("status").getValue()),
                "UpdateRow if status == new applies");
        SingleColumnValueCondition missingColumn = new SingleColumnValueCondition("absent",
                SingleColumnValueCondition.CompareOperator.EQUAL, ColumnValue.fromString("x"));
        missingColumn.setPassIfMissing(false);
        RowUpdateChange strict = new RowUpdateChange(table, key);
        strict.put("status", ColumnValue.fromString("strict"));
        strict.setCondition(ignoringRowIf(missingColumn));
        Expect.serviceError(CONDITION_FAILED, 403, () -> writes.update(strict),
                "a condition on a missing column with passIfMissing=false");
    }

    private void compositeCondition() {
        PrimaryKey key = Tables.key("composite", 1);
        writes.put(new RowPutChange(table, key)
                .addColumn("status", ColumnValue.fromString("open"))
                .addColumn("count", ColumnValue.fromLong(3)));
        SingleColumnValueCondition isOpen = new SingleColumnValueCondition("status",
                SingleColumnValueCondition.CompareOperator.EQUAL, ColumnValue.fromString("open"));
        SingleColumnValueCondition countAboveFive = new SingleColumnValueCondition("count",
                SingleColumnValueCondition.CompareOperator.GREATER_THAN, ColumnValue.fromLong(5));
        CompositeColumnValueCondition both = new CompositeColumnValueCondition(
                CompositeColumnValueCondition.LogicOperator.AND);
        both.addCondition(isOpen).addCondition(countAboveFive);
        RowUpdateChange and = new RowUpdateChange(table, key);
        and.put("count", ColumnValue.fromLong(10));
        and.setCondition(ignoringRowIf(both));
        Expect.serviceError(CONDITION_FAILED, 403, () -> writes.update(and), "open AND count > 5 (count is 3)");
        CompositeColumnValueCondition either = new CompositeColumnValueCondition(
                CompositeColumnValueCondition.LogicOperator.OR);
        either.addCondition(isOpen).addCondition(countAboveFive);
        RowUpdateChange or = new RowUpdateChange(table, key);
        or.put("count", ColumnValue.fromLong(4));
        or.setCondition(ignoringRowIf(either));
        writes.update(or);
        Expect.equal("INTEGER:4", Describe.value(get(key).getLatestColumn("count").getValue()),
                "open OR count > 5 applies");
    }

    private void batchWriteAndGet() {
        List<RowChange> changes = new ArrayList<>();
        for (int n = 0; n < 10; n++) {
            changes.add(new RowPutChange(table, Tables.key("batch", n)).addColumn("v", ColumnValue.fromLong(n * 10)));
        }
        RowUpdateChange update = new RowUpdateChange(table, Tables.key("types", 1));
        update.put("s", ColumnValue.fromString("batched"));
        changes.add(update);
        changes.add(new RowDeleteChange(table, Tables.key("composite", 1)));
        writes.batch(changes);
        MultiRowQueryCriteria criteria = new MultiRowQueryCriteria(table);
        criteria.setMaxVersions(1);
        for (int n = 0; n < 10; n++) {
            criteria.addRow(Tables.key("batch", n));
        }
        criteria.addRow(Tables.key("composite", 1));
        BatchGetRowRequest request = new BatchGetRowRequest();
        request.addMultiRowQueryCriteria(criteria);
        BatchGetRowResponse response = client.batchGetRow(request);
        Expect.isTrue(response.isAllSucceed(), "BatchGetRow: every row succeeds");
        List<BatchGetRowResponse.RowResult> results = response.getBatchGetRowResult(table);
        Expect.equal(11, results.size(), "BatchGetRow results");
        for (int n = 0; n < 10; n++) {
            Row row = results.get(n).getRow();
            Expect.isTrue(row != null, "BatchGetRow row batch/" + n);
            Expect.equal("INTEGER:" + n * 10, Describe.value(row.getLatestColumn("v").getValue()), "batch/" + n);
        }
        Expect.isTrue(results.get(10).getRow() == null, "BatchGetRow of the row the batch deleted");
        Expect.equal("STRING:batched", Describe.value(get(Tables.key("types", 1)).getLatestColumn("s").getValue()),
                "the batch's update");
    }

    private void getRange() {
        Expect.equal(List.of(0L, 1L, 2L, 3L, 4L, 5L, 6L, 7L, 8L, 9L), rangeOfBatch(Direction.FORWARD),
                "GetRange forward over batch/*, 4 rows a page");
        Expect.equal(List.of(9L, 8L, 7L, 6L, 5L, 4L, 3L, 2L, 1L, 0L), rangeOfBatch(Direction.BACKWARD),
                "GetRange backward over batch/*, 4 rows a page");
    }

    private List<Long> rangeOfBatch(Direction direction) {
        PrimaryKey start = Tables.key("batch", direction == Direction.FORWARD ? 0 : 100);
        PrimaryKey end = Tables.key("batch", direction == Direction.FORWARD ? 100 : -1);
        List<Long> seen = new ArrayList<>();
        int pages = 0;
        while (start != null) {
            RangeRowQueryCriteria criteria = new RangeRowQueryCriteria(table);
            criteria.setInclusiveStartPrimaryKey(start);
            criteria.setExclusiveEndPrimaryKey(end);
            criteria.setDirection(direction);
            criteria.setMaxVersions(1);
            criteria.setLimit(4);
            GetRangeResponse response = client.getRange(new GetRangeRequest(criteria));
            for (Row row : response.getRows()) {
                seen.add(row.getPrimaryKey().getPrimaryKeyColumn("n").getValue().asLong());
            }
            start = response.getNextStartPrimaryKey();
            Expect.isTrue(++pages <= 10, "GetRange keeps answering a next start key: " + start);
        }
        return seen;
    }
}
