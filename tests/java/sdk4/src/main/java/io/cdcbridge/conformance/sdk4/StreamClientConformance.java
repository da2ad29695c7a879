package io.cdcbridge.conformance.sdk4;

import com.alicloud.openservices.tablestore.ClientException;
import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.model.ColumnValue;
import com.alicloud.openservices.tablestore.model.PutRowRequest;
import com.alicloud.openservices.tablestore.model.RowPutChange;
import com.alicloud.openservices.tablestore.model.StreamShard;
import com.aliyun.openservices.ots.internal.streamclient.ClientConfig;
import com.aliyun.openservices.ots.internal.streamclient.StreamConfig;
import com.aliyun.openservices.ots.internal.streamclient.Worker;
import com.aliyun.openservices.ots.internal.streamclient.model.WorkerStatus;
import io.cdcbridge.conformance.EmulatorAdmin;
import io.cdcbridge.conformance.Expect;
import io.cdcbridge.conformance.Settings;
import io.cdcbridge.conformance.StreamReading;
import io.cdcbridge.conformance.Suite;
import io.cdcbridge.conformance.Tables;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Alibaba's stream client (tablestore-streamclient 1.0.0 on its declared SDK 4.3.1) running two Workers against the
 * emulator through a split, a merge and a failover (the Worker reading the merged shard is stopped): every written
 * record must arrive, each key's records first arrive in write order, and no child shard is read before its parents
 * were read to their end.
 */
public final class StreamClientConformance {
    private static final int KEYS = 20;
    private static final int VERSIONS_PER_PHASE = 5;
    private static final long PHASE_TIMEOUT_MS = 90_000;

    private final Settings settings;
    private final SyncClient writer;
    private final String table;
    private final List<Delivery> deliveries = Collections.synchronizedList(new ArrayList<>());
    private final AtomicLong arrivals = new AtomicLong();
    private final Map<String, Long> written = new LinkedHashMap<>(); // key -> last version written
    private final Map<String, Worker> workers = new LinkedHashMap<>();
    private final List<SyncClient> workerClients = new ArrayList<>();
    private final ExecutorService workerThreads = Executors.newCachedThreadPool();
    /** Per worker: its run loop and the executor its shard tasks (reads, processing) run on. */
    private final Map<String, Future<?>> workerLoops = new LinkedHashMap<>();
    private final Map<String, ExecutorService> workerTasks = new LinkedHashMap<>();
    /** Each phase builds on the one before: once one failed, the later ones fail at once instead of waiting. */
    private String brokenPhase;

    private StreamClientConformance(Settings settings) {
        this.settings = settings;
        this.writer = client(settings);
        this.table = settings.table("streamclient");
    }

    public static void main(String[] args) {
        Settings settings = Settings.fromEnvironment();
        Suite suite = new Suite("streamclient");
        StreamClientConformance run = new StreamClientConformance(settings);
        int exit;
        try {
            run.run(suite);
        } finally {
            exit = suite.finish();
            run.close();
        }
        System.exit(exit);
    }

    private static SyncClient client(Settings settings) {
        return new SyncClient(settings.endpoint(), settings.accessKeyId(), settings.accessKeySecret(),
                settings.instance());
    }

    private void run(Suite suite) {
        EmulatorAdmin admin = new EmulatorAdmin(settings.endpoint());
        String[] merged = new String[1];
        suite.check("two-workers-read-the-stream", () -> phase("two-workers-read-the-stream", () -> {
            Tables.create(writer, table, true);
            startWorker("worker-a");
            startWorker("worker-b");
            writePhase(1);
            awaitEverything("phase 1, before any split");
        }));
        suite.check("split-children-read-after-parent", () -> phase("split-children-read-after-parent", () -> {
            String parent = StreamReading.parentsFirst(shards()).get(0);
            List<String> children = admin.split(table, parent);
            writePhase(2);
            merged[0] = admin.merge(table, children.get(0), children.get(1));
            writePhase(3);
            awaitEverything("phases 2-3, across the split and the merge");
        }));
        suite.check("failover-after-a-worker-stops", () -> phase("failover-after-a-worker-stops", () -> {
            String owner = lastReaderOf(merged[0]);
            stop(owner);
            writePhase(4);
            awaitEverything("phase 4, after " + owner + " stopped");
            Set<String> phaseFourReaders = new HashSet<>();
            long firstVersionOfPhaseFour = 3L * VERSIONS_PER_PHASE + 1;
            for (Delivery delivery : snapshot()) {
                if (delivery.version() >= firstVersionOfPhaseFour) {
                    phaseFourReaders.add(delivery.workerId());
                }
            }
            Expect.isTrue(!phaseFourReaders.contains(owner) && !phaseFourReaders.isEmpty(),
                    "records written after " + owner + " stopped are read by the other worker: " + phaseFourReaders);
        }));
        suite.check("every-record-arrives-in-key-order", () -> phase("key-order", this::checkEveryRecordInKeyOrder));
        suite.check("children-after-parents", () -> phase("children-after-parents", this::checkChildrenAfterParents));
    }

    private void phase(String name, Suite.Check body) throws Exception {
        if (brokenPhase != null) {
            throw new AssertionError("not reached: phase " + brokenPhase + " failed");
        }
        try {
            body.run();
        } catch (Exception | AssertionError error) {
            brokenPhase = name;
            throw error;
        }
    }

    private void startWorker(String workerId) {
        ClientConfig config = new ClientConfig();
        config.setLeaseDurationMillis(6_000);
        config.setRenewerIntervalMillis(1_000);
        config.setTakerIntervalMillis(1_000);
        config.setSyncShardIntervalMillis(1_000);
        config.setParentShardPollIntervalMillis(300);
        config.setWorkerIdleTimeMillis(200);
        config.setCheckTableReadyIntervalMillis(500);
        SyncClient client = client(settings);
        workerClients.add(client);
        StreamConfig stream = new StreamConfig();
        stream.setOTSClient(client);
        stream.setDataTableName(table);
        stream.setStatusTableName(settings.table("streamclient_status"));
        stream.setMaxRecords(50);
        Worker worker;
        ExecutorService tasks = Executors.newCachedThreadPool();
        try {
            worker = new Worker(workerId, config, stream,
                    new RecordingProcessor.Factory(workerId, deliveries, arrivals), tasks);
        } catch (ClientException error) {
            throw new AssertionError("creating " + workerId + " (it reads the data table's stream details with "
                    + "DescribeTable): " + error.getMessage(), error);
        }
        workers.put(workerId, worker);
        workerTasks.put(workerId, tasks);
        workerLoops.put(workerId, workerThreads.submit(worker));
    }

    /** Stop a Worker and wait until it has (so nothing written afterwards can reach it). */
    private void stop(String workerId) throws InterruptedException {
        Worker worker = workers.get(workerId);
        worker.shutdown();
        long deadline = System.currentTimeMillis() + PHASE_TIMEOUT_MS;
        while (worker.getWorkerStatus() != WorkerStatus.SHUTDOWN) {
            if (System.currentTimeMillis() > deadline) {
                throw new AssertionError(workerId + " did not shut down within " + PHASE_TIMEOUT_MS / 1000 + " s: "
                        + worker.getWorkerStatus());
            }
            Thread.sleep(100);
        }
        // SHUTDOWN is only a flag: the run loop may still be in its last pass, and shard tasks it submitted may still
        // read the stream. The worker has stopped once both are over.
        try {
            workerLoops.get(workerId).get(PHASE_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException error) {
            throw new AssertionError(workerId + "'s run loop did not end after its shutdown: " + error, error);
        }
        ExecutorService tasks = workerTasks.get(workerId);
        tasks.shutdown();
        if (!tasks.awaitTermination(PHASE_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
            throw new AssertionError(workerId + "'s shard tasks still ran " + PHASE_TIMEOUT_MS / 1000
                    + " s after its shutdown");
        }
    }

    /** Each key gets the next VERSIONS_PER_PHASE versions (column v), interleaved across keys. */
    private void writePhase(int phase) {
        for (int i = 0; i < VERSIONS_PER_PHASE; i++) {
            long version = (long) (phase - 1) * VERSIONS_PER_PHASE + i + 1;
            for (int k = 0; k < KEYS; k++) {
                String id = String.format("key-%02d", k);
                writer.putRow(new PutRowRequest(new RowPutChange(table, Tables.key(id, 0))
                        .addColumn("v", ColumnValue.fromLong(version))));
                written.put("id=" + id + ",n=0", version);
            }
        }
    }

    /** Wait until every write so far arrived; fail at once if a Worker errs, else after PHASE_TIMEOUT_MS. */
    private void awaitEverything(String what) throws InterruptedException {
        long deadline = System.currentTimeMillis() + PHASE_TIMEOUT_MS;
        while (!missing().isEmpty()) {
            for (Map.Entry<String, Worker> entry : workers.entrySet()) {
                Worker worker = entry.getValue();
                if (worker.getWorkerStatus() == WorkerStatus.ERROR) {
                    throw new AssertionError(what + ": " + entry.getKey() + " failed: " + worker.getException());
                }
            }
            if (System.currentTimeMillis() > deadline) {
                throw new AssertionError(what + ": records still missing after " + PHASE_TIMEOUT_MS / 1000
                        + " s: " + summary(missing()));
            }
            Thread.sleep(200);
        }
    }

    private Map<String, List<Long>> missing() {
        Map<String, Set<Long>> seen = new HashMap<>();
        for (Delivery delivery : snapshot()) {
            seen.computeIfAbsent(delivery.key(), k -> new HashSet<>()).add(delivery.version());
        }
        Map<String, List<Long>> missing = new LinkedHashMap<>();
        for (Map.Entry<String, Long> entry : written.entrySet()) {
            for (long version = 1; version <= entry.getValue(); version++) {
                if (!seen.getOrDefault(entry.getKey(), Set.of()).contains(version)) {
                    missing.computeIfAbsent(entry.getKey(), k -> new ArrayList<>()).add(version);
                }
            }
        }
        return missing;
    }

    /** "N records of M keys, e.g. key: versions" (the first three keys). */
    private static String summary(Map<String, List<Long>> missing) {
        int records = missing.values().stream().mapToInt(List::size).sum();
        return records + " records of " + missing.size() + " keys, e.g. "
                + missing.entrySet().stream().limit(3).map(e -> e.getKey() + ": " + e.getValue()).toList();
    }

    private void checkEveryRecordInKeyOrder() {
        Expect.isTrue(missing().isEmpty(), "records never delivered: " + summary(missing()));
        Map<String, Long> lastFirstArrival = new HashMap<>();
        Map<String, Set<Long>> seen = new HashMap<>();
        for (Delivery delivery : snapshot()) {
            if (!seen.computeIfAbsent(delivery.key(), k -> new HashSet<>()).add(delivery.version())) {
                continue; // a re-delivery after a failover starts from the last checkpoint: allowed
            }
            long previous = lastFirstArrival.getOrDefault(delivery.key(), 0L);
            Expect.equal(previous + 1, delivery.version(), "the version of " + delivery.key()
                    + " first delivered after version " + previous + " (" + delivery + ")");
            lastFirstArrival.put(delivery.key(), delivery.version());
        }
    }

    private void checkChildrenAfterParents() {
        Map<String, StreamShard> shards = shards();
        Expect.isTrue(shards.size() >= 4, "DescribeStream shows the parent, the split's two children and the merge's "
                + "child: " + shards.keySet());
        Map<String, long[]> spans = new HashMap<>(); // shard -> {first arrival, last arrival}
        for (Delivery delivery : snapshot()) {
            spans.merge(delivery.shardId(), new long[] {delivery.arrival(), delivery.arrival()},
                    (a, b) -> new long[] {Math.min(a[0], b[0]), Math.max(a[1], b[1])});
        }
        Expect.equal(shards.keySet(), spans.keySet(), "shards the workers read records from");
        for (StreamShard shard : shards.values()) {
            for (String parent : new String[] {shard.getParentId(), shard.getParentSiblingId()}) {
                if (parent != null && spans.containsKey(parent)) {
                    Expect.isTrue(spans.get(parent)[1] < spans.get(shard.getShardId())[0], "child "
                            + shard.getShardId() + " was read (from arrival " + spans.get(shard.getShardId())[0]
                            + ") before its parent " + parent + " was done (last arrival " + spans.get(parent)[1]
                            + ")");
                }
            }
        }
    }

    private String lastReaderOf(String shardId) {
        List<Delivery> all = snapshot();
        for (int i = all.size() - 1; i >= 0; i--) {
            if (all.get(i).shardId().equals(shardId)) {
                return all.get(i).workerId();
            }
        }
        throw new AssertionError("no worker read the merged shard " + shardId);
    }

    private Map<String, StreamShard> shards() {
        return StreamReading.shards(writer, StreamReading.streamId(writer, table));
    }

    private List<Delivery> snapshot() {
        synchronized (deliveries) {
            List<Delivery> copy = new ArrayList<>(deliveries);
            copy.sort((a, b) -> Long.compare(a.arrival(), b.arrival()));
            return copy;
        }
    }

    private void close() {
        workers.values().forEach(Worker::shutdown);
        workerThreads.shutdownNow();
        workerTasks.values().forEach(ExecutorService::shutdownNow);
        workerClients.forEach(SyncClient::shutdown);
        writer.shutdown();
    }
}
