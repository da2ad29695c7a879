package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.model.DeleteTableRequest;
import com.alicloud.openservices.tablestore.model.DescribeTableRequest;
import com.alicloud.openservices.tablestore.model.DescribeTableResponse;
import com.alicloud.openservices.tablestore.model.ListStreamRequest;
import com.alicloud.openservices.tablestore.model.PrimaryKeySchema;
import com.alicloud.openservices.tablestore.model.StreamSpecification;
import com.alicloud.openservices.tablestore.model.TableOptions;
import com.alicloud.openservices.tablestore.model.UpdateTableRequest;
import java.util.ArrayList;
import java.util.List;

/** CreateTable, DescribeTable, ListTable, UpdateTable (options, stream spec) and DeleteTable as the service does. */
public final class TableApiChecks {
    private final SyncClient client;
    private final Settings settings;

    public TableApiChecks(SyncClient client, Settings settings) {
        this.client = client;
        this.settings = settings;
    }

    public void run(Suite suite) {
        String table = settings.table("tables");
        suite.check("create-describe-table", () -> {
            Tables.create(client, table, true);
            DescribeTableResponse described = client.describeTable(new DescribeTableRequest(table));
            Expect.equal(table, described.getTableMeta().getTableName(), "DescribeTable's table name");
            List<String> schema = new ArrayList<>();
            for (PrimaryKeySchema column : described.getTableMeta().getPrimaryKeyList()) {
                schema.add(column.getName() + ":" + column.getType());
            }
            Expect.equal(List.of("id:STRING", "n:INTEGER"), schema, "DescribeTable's primary key");
            Expect.equal(1, described.getTableOptions().getMaxVersions(), "max versions");
            Expect.equal(-1, described.getTableOptions().getTimeToLive(), "time to live");
            Expect.isTrue(described.getStreamDetails().isEnableStream(), "DescribeTable: stream enabled");
            Expect.equal(Tables.STREAM_EXPIRATION_HOURS, described.getStreamDetails().getExpirationTime(),
                    "stream expiration hours");
            Expect.isTrue(described.getStreamDetails().getStreamId() != null, "DescribeTable names the stream id");
        });
        suite.check("create-existing-table-refused", () -> Expect.serviceError("OTSObjectAlreadyExist", 409,
                () -> Tables.create(client, table, false), "CreateTable of an existing table"));
        suite.check("list-table", () -> Expect.isTrue(client.listTable().getTableNames().contains(table),
                "ListTable names " + table + ": " + client.listTable().getTableNames()));
        suite.check("update-table-options", () -> {
            UpdateTableRequest request = new UpdateTableRequest(table);
            TableOptions options = new TableOptions();
            options.setMaxVersions(3);
            request.setTableOptionsForUpdate(options);
            client.updateTable(request);
            DescribeTableResponse described = client.describeTable(new DescribeTableRequest(table));
            Expect.equal(3, described.getTableOptions().getMaxVersions(), "max versions after UpdateTable");
        });
        suite.check("update-table-stream-spec", () -> {
            String plain = settings.table("tables_plain");
            Tables.create(client, plain, false);
            Expect.isTrue(!client.describeTable(new DescribeTableRequest(plain)).getStreamDetails().isEnableStream(),
                    "a table created without a stream has none");
            Expect.equal(0, client.listStream(new ListStreamRequest(plain)).getStreams().size(),
                    "ListStream of a table without a stream");
            UpdateTableRequest enable = new UpdateTableRequest(plain);
            enable.setStreamSpecification(new StreamSpecification(true, 12));
            client.updateTable(enable);
            DescribeTableResponse described = client.describeTable(new DescribeTableRequest(plain));
            Expect.isTrue(described.getStreamDetails().isEnableStream(), "stream enabled by UpdateTable");
            Expect.equal(12, described.getStreamDetails().getExpirationTime(), "expiration set by UpdateTable");
            Expect.equal(1, client.listStream(new ListStreamRequest(plain)).getStreams().size(),
                    "ListStream after enabling the stream");
            UpdateTableRequest disable = new UpdateTableRequest(plain);
            disable.setStreamSpecification(new StreamSpecification(false));
            client.updateTable(disable);
            Expect.isTrue(!client.describeTable(new DescribeTableRequest(plain)).getStreamDetails().isEnableStream(),
                    "stream disabled by UpdateTable");
        });
        suite.check("delete-table", () -> {
            client.deleteTable(new DeleteTableRequest(table));
            Expect.isTrue(!client.listTable().getTableNames().contains(table), "ListTable after DeleteTable");
            Expect.serviceError("OTSObjectNotExist", 404, () -> client.describeTable(new DescribeTableRequest(table)),
                    "DescribeTable of a deleted table");
        });
    }
}
