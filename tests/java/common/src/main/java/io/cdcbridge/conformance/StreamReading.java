package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.model.DescribeStreamRequest;
import com.alicloud.openservices.tablestore.model.DescribeStreamResponse;
import com.alicloud.openservices.tablestore.model.GetShardIteratorRequest;
import com.alicloud.openservices.tablestore.model.GetStreamRecordRequest;
import com.alicloud.openservices.tablestore.model.GetStreamRecordResponse;
import com.alicloud.openservices.tablestore.model.ListStreamRequest;
import com.alicloud.openservices.tablestore.model.Stream;
import com.alicloud.openservices.tablestore.model.StreamRecord;
import com.alicloud.openservices.tablestore.model.StreamShard;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Reads a table's whole stream with the four stream calls only (ListStream, DescribeStream, GetShardIterator,
 * GetStreamRecord), parents before children as a consumer must, and collects each key's records in that order.
 */
public final class StreamReading {
    /** What one full read saw: the shards (by id) and every record's description per key. */
    public record Result(Map<String, StreamShard> shards, Map<String, List<String>> recordsByKey,
                         List<GetStreamRecordResponse> responses) {}

    private static final int PAGE = 100;

    private StreamReading() {}

    public static String streamId(SyncClient client, String table) {
        List<Stream> streams = client.listStream(new ListStreamRequest(table)).getStreams();
        Expect.equal(1, streams.size(), "ListStream(" + table + ") streams");
        return streams.get(0).getStreamId();
    }

    public static Map<String, StreamShard> shards(SyncClient client, String streamId) {
        Map<String, StreamShard> shards = new LinkedHashMap<>();
        String next = null;
        do {
            DescribeStreamRequest request = new DescribeStreamRequest(streamId);
            if (next != null) {
                request.setInclusiveStartShardId(next);
            }
            DescribeStreamResponse response = client.describeStream(request);
            for (StreamShard shard : response.getShards()) {
                shards.put(shard.getShardId(), shard);
            }
            next = response.getNextShardId();
        } while (next != null && !next.isEmpty());
        return shards;
    }

    public static Result readAll(SyncClient client, String table) {
        String streamId = streamId(client, table);
        Map<String, StreamShard> shards = shards(client, streamId);
        Map<String, List<String>> byKey = new LinkedHashMap<>();
        List<GetStreamRecordResponse> responses = new ArrayList<>();
        for (String shardId : parentsFirst(shards)) {
            String iterator = client.getShardIterator(new GetShardIteratorRequest(streamId, shardId)).getShardIterator();
            while (iterator != null) {
                GetStreamRecordRequest request = new GetStreamRecordRequest(iterator);
                request.setLimit(PAGE);
                GetStreamRecordResponse response = client.getStreamRecord(request);
                responses.add(response);
                for (StreamRecord record : response.getRecords()) {
                    byKey.computeIfAbsent(Describe.key(record.getPrimaryKey()), k -> new ArrayList<>())
                            .add(Describe.record(record));
                }
                if (response.getRecords().isEmpty()) {
                    break; // an open shard read to its end answers no records (and the same iterator)
                }
                iterator = response.getNextShardIterator();
            }
        }
        return new Result(shards, byKey, responses);
    }

    /** Shard ids ordered so every shard comes after its parents (shards whose parents are gone come first). */
    public static List<String> parentsFirst(Map<String, StreamShard> shards) {
        Set<String> ordered = new LinkedHashSet<>();
        while (ordered.size() < shards.size()) {
            int before = ordered.size();
            for (StreamShard shard : shards.values()) {
                if (!ordered.contains(shard.getShardId()) && ready(shard.getParentId(), shards, ordered)
                        && ready(shard.getParentSiblingId(), shards, ordered)) {
                    ordered.add(shard.getShardId());
                }
            }
            if (ordered.size() == before) {
                throw new AssertionError("DescribeStream's shards have a parent cycle: " + shards.keySet());
            }
        }
        return new ArrayList<>(ordered);
    }

    private static boolean ready(String parent, Map<String, StreamShard> shards, Set<String> ordered) {
        return parent == null || parent.isEmpty() || !shards.containsKey(parent) || ordered.contains(parent);
    }
}
