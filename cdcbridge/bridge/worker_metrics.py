"""Feeds the Prometheus metrics of one bridge process from the plain counters kept on the hot paths.

Coordination counts its events in CoordinationStats and each shard's reads, checkpoints and unconfirmed records in
ShardProgress; the Kafka sink counts messages produced, acknowledged and failed, and the produce → ack latency, in
DeliveryStats. None of them knows Prometheus. This pump turns the increases since its last look into the counters of
WorkerMetrics, sets the gauges (leases held, lag per shard), and drops the series of shards this worker no longer
holds, every `interval` seconds and once more at stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from cdcbridge.coordination.stats import CoordinationStats, ShardProgressSnapshot
from cdcbridge.kafka.delivery_stats import DeliveryCounts, DeliveryStats
from cdcbridge.observability.metrics import LeaseEvent, WorkerMetrics
from cdcbridge.observability.retention import RetentionWatch

#: CoordinationStats counter → lease event it is exported as.
LEASE_EVENTS = {
    "leases_taken": LeaseEvent.TAKEN,
    "leases_renewed": LeaseEvent.RENEWED,
    "leases_lost": LeaseEvent.LOST,
    "leases_transferred": LeaseEvent.STOLEN,
    "leases_released": LeaseEvent.RELEASED,
    "steal_requests": LeaseEvent.STEAL_REQUESTED,
}

#: Table label of a topic the pump was not told about.
UNKNOWN_TABLE = "unknown"


class CoordinatedWorker(Protocol):
    """What the pump reads of a coordination Worker."""

    stats: CoordinationStats

    @property
    def state(self) -> str: ...

    def held_shard_ids(self) -> set[str]: ...


class StatsPump:
    """Copies counter increases into ``metrics`` on its own thread; :meth:`pump` is one deterministic pass."""

    def __init__(
        self,
        metrics: WorkerMetrics,
        workers: Mapping[str, CoordinatedWorker],
        worker_id: str,
        *,
        delivery: DeliveryStats | None = None,
        topic_tables: Mapping[str, str] | None = None,
        interval: float = 2.0,
        wall_clock: Callable[[], float] = time.time,
        expiration_seconds: Mapping[str, float] | None = None,
        retention: RetentionWatch | None = None,
    ) -> None:
        """``workers``: table → its coordination worker; ``delivery``: the Kafka sink's counts; ``topic_tables``:
        topic → table it carries (labels of the produced counter); ``wall_clock``: Unix seconds, for lag;
        ``expiration_seconds``: table → its stream's expiration, for the share of retention used (and, with
        ``retention``, the warnings)."""
        self._metrics = metrics
        self._workers = dict(workers)
        self._worker_id = worker_id
        self._delivery = delivery
        self._topic_tables = dict(topic_tables or {})
        self._interval = interval
        self._wall_clock = wall_clock
        self._expiration_seconds = dict(expiration_seconds or {})
        self._retention = retention
        self._lock = threading.Lock()
        self._seen_events: dict[str, dict[str, int]] = {table: {} for table in self._workers}
        self._seen_shards: dict[tuple[str, str], ShardProgressSnapshot] = {}
        self._exported_shards: set[tuple[str, str]] = set()
        self._fenced_tables: set[str] = set()
        self._seen_delivery: DeliveryCounts | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-pump", daemon=True)
        for topic, table in self._topic_tables.items():  # every configured topic shows up at 0 before traffic
            metrics.message_produced(table, topic, 0)
            metrics.message_acked(topic, count=0)

    def start(self) -> StatsPump:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and pump once more, so the last increases (the final checkpoints) are exported."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)
        self.pump()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.pump()

    def pump(self) -> None:
        with self._lock:
            now = self._wall_clock()
            held_total = 0
            for table, worker in self._workers.items():
                self._pump_events(table, worker)
                held = worker.held_shard_ids()
                held_total += len(held)
                self._pump_shards(table, worker.stats.shards(), held, now)
            self._metrics.set_leases_held(self._worker_id, held_total)
            if self._delivery is not None:
                self._pump_delivery(self._delivery.snapshot())

    def _pump_events(self, table: str, worker: CoordinatedWorker) -> None:
        now = worker.stats.snapshot()
        before = self._seen_events[table]
        for counter, event in LEASE_EVENTS.items():
            if (increase := now[counter] - before.get(counter, 0)) > 0:
                self._metrics.lease_event(event, increase)
        if (finished := now["shards_finished"] - before.get("shards_finished", 0)) > 0:
            self._metrics.shard_finished(finished)
        self._seen_events[table] = now
        if worker.state == "FENCED" and table not in self._fenced_tables:
            self._fenced_tables.add(table)
            self._metrics.worker_fenced()

    def _pump_shards(
        self, table: str, progress: Mapping[str, ShardProgressSnapshot], held: set[str], now: float
    ) -> None:
        metrics = self._metrics
        for shard, current in progress.items():
            key = (table, shard)
            before = self._seen_shards.get(key)
            self._seen_shards[key] = current
            if shard not in held:  # lost, released, handed over or finished: its series go
                if key in self._exported_shards:
                    self._exported_shards.discard(key)
                    metrics.forget_shard(table, shard)
                    if self._retention is not None:
                        self._retention.forget(table, shard)
                continue
            self._exported_shards.add(key)
            # Every held shard's counters exist (at 0 at first), so rate() and increase() see them from the start.
            metrics.records_fetched(table, shard, current.records_fetched - (before.records_fetched if before else 0))
            metrics.checkpoint_written(
                table, shard, current.checkpoints_written - (before.checkpoints_written if before else 0)
            )
            metrics.trimmed_data(
                table, shard, current.trimmed_data_events - (before.trimmed_data_events if before else 0)
            )
            for reason, count in current.checkpoint_failures.items():
                increase = count - (before.checkpoint_failures.get(reason, 0) if before else 0)
                if increase > 0:
                    metrics.checkpoint_failed(table, shard, reason, increase)
            if current.caught_up:
                seconds: float | None = 0.0
            elif current.last_commit_ms is not None:
                seconds = now - current.last_commit_ms / 1000
            else:
                seconds = None  # nothing read yet: no age to tell
            metrics.set_lag(table, shard, records=current.records_unconfirmed, seconds=seconds)
            metrics.set_halted(table, shard, current.halted)
            self._watch_retention(table, shard, current, now)

    def _watch_retention(self, table: str, shard: str, current: ShardProgressSnapshot, now: float) -> None:
        """Age of the oldest unread record (cdcbridge.observability.retention says how it is known) → gauges, logs."""
        if current.oldest_unread_us is not None:
            age = max(0.0, now - current.oldest_unread_us / 1e6)
        elif current.caught_up:
            age = 0.0
        else:
            return  # nothing read nor checkpointed yet: no age to tell
        expiration = self._expiration_seconds.get(table)
        ratio = None
        if expiration:
            ratio = age / expiration
            if self._retention is not None:
                ratio = self._retention.observe(table, shard, self._worker_id, age, expiration)
        self._metrics.set_retention(table, shard, age_seconds=age, used_ratio=ratio)

    def _pump_delivery(self, current: DeliveryCounts) -> None:
        metrics = self._metrics
        before = self._seen_delivery
        for topic, count in current.produced.items():
            if (increase := count - (before.produced.get(topic, 0) if before else 0)) > 0:
                metrics.message_produced(self._topic_tables.get(topic, UNKNOWN_TABLE), topic, increase)
        for topic, count in current.acked.items():
            if (increase := count - (before.acked.get(topic, 0) if before else 0)) > 0:
                metrics.message_acked(topic, count=increase)
        for (topic, kind), count in current.failed.items():
            if (increase := count - (before.failed.get((topic, kind), 0) if before else 0)) > 0:
                metrics.produce_error(topic, kind, increase)
        previous_counts = before.latency_counts if before else (0,) * len(current.latency_counts)
        latency_increase = [now - then for now, then in zip(current.latency_counts, previous_counts, strict=True)]
        if any(latency_increase):
            total = current.latency_sum_seconds - (before.latency_sum_seconds if before else 0.0)
            metrics.produce_latencies(current.latency_bounds, latency_increase, total)
        self._seen_delivery = current
