package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.model.CreateTableRequest;
import com.alicloud.openservices.tablestore.model.PrimaryKey;
import com.alicloud.openservices.tablestore.model.PrimaryKeyBuilder;
import com.alicloud.openservices.tablestore.model.PrimaryKeySchema;
import com.alicloud.openservices.tablestore.model.PrimaryKeyType;
import com.alicloud.openservices.tablestore.model.PrimaryKeyValue;
import com.alicloud.openservices.tablestore.model.ReservedThroughput;
import com.alicloud.openservices.tablestore.model.StreamSpecification;
import com.alicloud.openservices.tablestore.model.TableMeta;
import com.alicloud.openservices.tablestore.model.TableOptions;

/** The suite's table shape, primary key (id STRING, n INTEGER), and how to make one. */
public final class Tables {
    public static final int STREAM_EXPIRATION_HOURS = 24;

    private Tables() {}

    public static TableMeta meta(String table) {
        TableMeta meta = new TableMeta(table);
        meta.addPrimaryKeyColumn(new PrimaryKeySchema("id", PrimaryKeyType.STRING));
        meta.addPrimaryKeyColumn(new PrimaryKeySchema("n", PrimaryKeyType.INTEGER));
        return meta;
    }

    /** Create `table` (one version kept, no TTL), with a stream when `streamed`. */
    public static void create(SyncClient client, String table, boolean streamed) {
        CreateTableRequest request = new CreateTableRequest(meta(table), new TableOptions(-1, 1),
                new ReservedThroughput(0, 0));
        if (streamed) {
            request.setStreamSpecification(new StreamSpecification(true, STREAM_EXPIRATION_HOURS));
        }
        client.createTable(request);
    }

    public static PrimaryKey key(String id, long n) {
        return PrimaryKeyBuilder.createPrimaryKeyBuilder()
                .addPrimaryKeyColumn("id", PrimaryKeyValue.fromString(id))
                .addPrimaryKeyColumn("n", PrimaryKeyValue.fromLong(n))
                .build();
    }
}
