"""Feeds the Prometheus metrics of one bridge process from the coordination workers' counters.

Coordination counts its events in plain CoordinationStats (it knows nothing of Prometheus); this pump turns the
increases since its last look into lease-event counters, finished shards, trimmed-data events and the number of
leases held, every `interval` seconds and once more at stop.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from cdcbridge.coordination.worker import Worker
from cdcbridge.observability.metrics import LeaseEvent, WorkerMetrics

#: CoordinationStats counter → lease event it is exported as.
LEASE_EVENTS = {
    "leases_taken": LeaseEvent.TAKEN,
    "leases_renewed": LeaseEvent.RENEWED,
    "leases_lost": LeaseEvent.LOST,
    "leases_transferred": LeaseEvent.STOLEN,
    "leases_released": LeaseEvent.RELEASED,
    "steal_requests": LeaseEvent.STEAL_REQUESTED,
}


class StatsPump:
    def __init__(self, metrics: WorkerMetrics, workers: Mapping[str, Worker], worker_id: str,
                 interval: float = 2.0) -> None:  # fmt: skip
        self._metrics = metrics
        self._workers = dict(workers)
        self._worker_id = worker_id
        self._interval = interval
        self._seen: dict[str, dict[str, int]] = {table: {} for table in self._workers}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-pump", daemon=True)

    def start(self) -> StatsPump:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.pump()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.pump()

    def pump(self) -> None:
        held = 0
        for table, worker in self._workers.items():
            now = worker.stats.snapshot()
            before = self._seen[table]
            for counter, event in LEASE_EVENTS.items():
                if now[counter] > before.get(counter, 0):
                    self._metrics.lease_event(event, now[counter] - before.get(counter, 0))
            for _ in range(now["shards_finished"] - before.get("shards_finished", 0)):
                self._metrics.shard_finished()
            for _ in range(now["trimmed_data_events"] - before.get("trimmed_data_events", 0)):
                self._metrics.trimmed_data(table, "-")
            self._seen[table] = now
            held += len(worker.held_shard_ids())
        self._metrics.set_leases_held(self._worker_id, held)
