package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.model.ColumnValue;
import com.alicloud.openservices.tablestore.model.RowPutChange;
import com.alicloud.openservices.tablestore.model.StreamShard;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * The stream calls against every write the suite made: after the row checks, the table's only shard is split, more
 * rows land in the children, and a full read (parents first) must show exactly the acknowledged writes, per key in
 * write order, and none of the refused ones.
 */
public final class StreamApiChecks {
    private final SyncClient client;
    private final String table;
    private final Writes writes;
    private final ExpectedStream expected;
    private final EmulatorAdmin admin;

    public StreamApiChecks(SyncClient client, String table, Writes writes, ExpectedStream expected,
                           EmulatorAdmin admin) {
        this.client = client;
        this.table = table;
        this.writes = writes;
        this.expected = expected;
        this.admin = admin;
    }

    public void run(Suite suite) {
        suite.check("stream-split-children-name-parent", () -> {
            String streamId = StreamReading.streamId(client, table);
            Map<String, StreamShard> before = StreamReading.shards(client, streamId);
            Expect.equal(1, before.size(), "a new table's stream has one shard");
            String parent = before.keySet().iterator().next();
            List<String> children = admin.split(table, parent);
            Expect.equal(2, children.size(), "a split's children");
            Map<String, StreamShard> after = StreamReading.shards(client, streamId);
            for (String child : children) {
                Expect.isTrue(after.containsKey(child), "DescribeStream lists child " + child + ": " + after.keySet());
                Expect.equal(parent, after.get(child).getParentId(), "child " + child + "'s parent");
            }
            for (int n = 0; n < 20; n++) {
                writes.put(new RowPutChange(table, Tables.key("after-split-" + n, n))
                        .addColumn("v", ColumnValue.fromLong(n)));
            }
        });
        suite.check("stream-records-match-every-write", () -> {
            StreamReading.Result read = StreamReading.readAll(client, table);
            Map<String, List<String>> want = expected.byKey();
            for (Map.Entry<String, List<String>> entry : want.entrySet()) {
                Expect.equal(entry.getValue(), read.recordsByKey().get(entry.getKey()),
                        "stream records of key " + entry.getKey());
            }
            Set<String> unexpected = new TreeSet<>(read.recordsByKey().keySet());
            unexpected.removeAll(want.keySet());
            Expect.isTrue(unexpected.isEmpty(), "stream records of keys no acknowledged write touched: "
                    + unexpected.stream().map(k -> k + " " + read.recordsByKey().get(k)).toList());
            Expect.isTrue(expected.size() > 30, "the suite wrote " + expected.size() + " changes");
        });
    }
}
