package io.cdcbridge.conformance.sdk5;

import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.TunnelClient;
import com.alicloud.openservices.tablestore.model.Column;
import com.alicloud.openservices.tablestore.model.ColumnValue;
import com.alicloud.openservices.tablestore.model.DescribeTableRequest;
import com.alicloud.openservices.tablestore.model.GetShardIteratorRequest;
import com.alicloud.openservices.tablestore.model.GetStreamRecordRequest;
import com.alicloud.openservices.tablestore.model.GetStreamRecordResponse;
import com.alicloud.openservices.tablestore.model.PrimaryKey;
import com.alicloud.openservices.tablestore.model.ReturnType;
import com.alicloud.openservices.tablestore.model.Row;
import com.alicloud.openservices.tablestore.model.RowPutChange;
import com.alicloud.openservices.tablestore.model.RowUpdateChange;
import com.alicloud.openservices.tablestore.model.StreamShard;
import com.alicloud.openservices.tablestore.model.tunnel.CreateTunnelRequest;
import com.alicloud.openservices.tablestore.model.tunnel.TunnelType;
import io.cdcbridge.conformance.Describe;
import io.cdcbridge.conformance.Expect;
import io.cdcbridge.conformance.Settings;
import io.cdcbridge.conformance.StreamReading;
import io.cdcbridge.conformance.Suite;
import io.cdcbridge.conformance.Tables;
import io.cdcbridge.conformance.Writes;
import java.util.Map;

/**
 * What only SDK 5.x can ask: increments with ReturnType.RT_AFTER_MODIFY (Alibaba's atomic-counter example),
 * DescribeTable's creation time, GetStreamRecord's may_more_record, and the Tunnel API (not emulated: it must say
 * OTSUnsupportOperation, not fail the signature).
 */
final class Sdk5OnlyChecks {
    private final SyncClient client;
    private final Settings settings;
    private final String rowTable;
    private final Writes writes;

    Sdk5OnlyChecks(SyncClient client, Settings settings, String rowTable, Writes writes) {
        this.client = client;
        this.settings = settings;
        this.rowTable = rowTable;
        this.writes = writes;
    }

    void run(Suite suite) {
        suite.check("increment-return-after-modify", this::incrementReturnsNewValue);
        suite.check("describe-table-creation-time", () -> {
            long created = client.describeTable(new DescribeTableRequest(rowTable)).getCreationTime();
            long now = System.currentTimeMillis() * 1000;
            Expect.isTrue(created > now - 3_600_000_000L && created <= now + 60_000_000L,
                    "DescribeTable's creation_time is when the table was made (µs since epoch): " + created);
        });
        suite.check("get-stream-record-may-more-record", () -> {
            String streamId = StreamReading.streamId(client, rowTable);
            Map<String, StreamShard> shards = StreamReading.shards(client, streamId);
            String shardId = StreamReading.parentsFirst(shards).get(0);
            String iterator = client.getShardIterator(new GetShardIteratorRequest(streamId, shardId))
                    .getShardIterator();
            GetStreamRecordRequest request = new GetStreamRecordRequest(iterator);
            request.setLimit(1);
            GetStreamRecordResponse response = client.getStreamRecord(request);
            Expect.equal(1, response.getRecords().size(), "GetStreamRecord with limit 1");
            Expect.equal(Boolean.TRUE, response.getMayMoreRecord(), "may_more_record after one of many records");
        });
        suite.check("tunnel-api-unsupported", () -> {
            TunnelClient tunnels = new TunnelClient(settings.endpoint(), settings.accessKeyId(),
                    settings.accessKeySecret(), settings.instance(), Clients.configuration());
            try {
                Expect.serviceError("OTSUnsupportOperation", 0,
                        () -> tunnels.createTunnel(new CreateTunnelRequest(rowTable, "t", TunnelType.Stream)),
                        "CreateTunnel on the emulator");
            } finally {
                tunnels.shutdown();
            }
        });
    }

    private void incrementReturnsNewValue() {
        PrimaryKey key = Tables.key("counter", 1);
        writes.put(new RowPutChange(rowTable, key).addColumn("hits", ColumnValue.fromLong(10)));
        RowUpdateChange increment = new RowUpdateChange(rowTable, key);
        increment.increment(new Column("hits", ColumnValue.fromLong(5)));
        increment.setReturnType(ReturnType.RT_AFTER_MODIFY);
        increment.addReturnColumn("hits");
        Row returned = writes.update(increment, Map.of("hits", ColumnValue.fromLong(15))).getRow();
        Expect.isTrue(returned != null, "UpdateRow with RT_AFTER_MODIFY returns a row");
        Expect.isTrue(returned.getLatestColumn("hits") != null, "the returned row holds the incremented column");
        Expect.equal("INTEGER:15", Describe.value(returned.getLatestColumn("hits").getValue()),
                "the incremented value returned");
    }
}
