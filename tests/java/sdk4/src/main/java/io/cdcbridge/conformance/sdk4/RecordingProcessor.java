package io.cdcbridge.conformance.sdk4;

import com.alicloud.openservices.tablestore.model.StreamRecord;
import com.aliyun.openservices.ots.internal.streamclient.model.IRecordProcessor;
import com.aliyun.openservices.ots.internal.streamclient.model.IRecordProcessorCheckpointer;
import com.aliyun.openservices.ots.internal.streamclient.model.IRecordProcessorFactory;
import com.aliyun.openservices.ots.internal.streamclient.model.InitializationInput;
import com.aliyun.openservices.ots.internal.streamclient.model.ProcessRecordsInput;
import com.aliyun.openservices.ots.internal.streamclient.model.ShutdownInput;
import com.aliyun.openservices.ots.internal.streamclient.model.ShutdownReason;
import io.cdcbridge.conformance.Describe;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The stream client's record processor: notes every record it gets (with a global arrival number, so the order
 * across shards and workers can be checked) and checkpoints after each batch and at a shard's end.
 */
final class RecordingProcessor implements IRecordProcessor {
    /** Makes one processor per shard for one Worker. */
    record Factory(String workerId, List<Delivery> deliveries, AtomicLong arrivals) implements IRecordProcessorFactory {
        @Override
        public IRecordProcessor createProcessor() {
            return new RecordingProcessor(workerId, deliveries, arrivals);
        }
    }

    private final String workerId;
    private final List<Delivery> deliveries;
    private final AtomicLong arrivals;
    private String shardId = "?";

    private RecordingProcessor(String workerId, List<Delivery> deliveries, AtomicLong arrivals) {
        this.workerId = workerId;
        this.deliveries = deliveries;
        this.arrivals = arrivals;
    }

    @Override
    public void initialize(InitializationInput input) {
        shardId = input.getShardInfo().getShardId();
    }

    @Override
    public void processRecords(ProcessRecordsInput input) {
        for (StreamRecord record : input.getRecords()) {
            long version = record.getColumns().get(0).getColumn().getValue().asLong();
            deliveries.add(new Delivery(arrivals.incrementAndGet(), workerId, shardId,
                    Describe.key(record.getPrimaryKey()), version));
        }
        checkpoint(input.getCheckpointer());
    }

    @Override
    public void shutdown(ShutdownInput input) {
        if (input.getShutdownReason() == ShutdownReason.TERMINATE) {
            checkpoint(input.getCheckpointer()); // the shard is read to its end: its children may start
        }
    }

    private static void checkpoint(IRecordProcessorCheckpointer checkpointer) {
        try {
            checkpointer.checkpoint();
        } catch (Exception error) {
            // A lease lost to the other worker: it re-reads from the last checkpoint, which the checks allow.
            System.err.println("checkpoint refused: " + error);
        }
    }
}
