"""Failover benchmark: real worker processes against an emulator process, killed, stopped and joined.

Measures what a user of a lease-coordinated bridge waits for (leases.md §5, issue 4):

- failover after kill -9: from the kill until a peer delivers the victim's shards' next records
  (goal ≤ 1.2 × (lease duration + take interval));
- hand-off on SIGTERM: from the signal until a peer delivers the stopped worker's shards' next records
  (goal ≤ one take interval: the lease is released, not left to expire);
- rebalance: a second worker joins one that holds 8 shards: time until 4/4 and the steal requests it took,
  then ownership changes during a quiet window afterwards (goal: none).

The harness here (a cluster of recording worker processes, a load writer, sharded tables, lease reads; the
processes themselves come from `cdcbridge.harness.processes`) is also what the multi-process integration tests in
tests/integration/coordination run on.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import shutil
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.settings import CoordinationSettings
from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.harness.processes import EmulatorProcess, RecordingWorkerProcess
from cdcbridge.harness.recording_worker import FAST_TIMINGS, JournalContents, WorkerOptions, read_journals

log = logging.getLogger(__name__)

T = TypeVar("T")

INSTANCE = "cdcbridge"
ACCESS_KEY_ID = "emulator-id"
ACCESS_KEY_SECRET = "emulator-secret"
VERSION_COLUMN = "v"


class HarnessError(RuntimeError):
    """A process of the harness did not start or a condition was not reached in time; the message says which."""


def wait_until(condition: Callable[[], T], timeout: float, what: str, poll: float = 0.1) -> T:
    """Poll `condition` until it returns something truthy (returned) or `timeout` passes (HarnessError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise HarnessError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


# ----- the workers of one table ------------------------------------------------------------------------------------


class WorkerCluster:
    """The workers of one table: starts them, reads their journals and the lease rows, kills what is left on exit."""

    def __init__(self, work_dir: Path, endpoint: str, table: str, status_table: str, stream_id: str, ots: Any) -> None:
        from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore

        work_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir = work_dir
        self.endpoint = endpoint
        self.table = table
        self.status_table = status_table
        self.stream_id = stream_id
        self.workers: dict[str, RecordingWorkerProcess] = {}
        self._ots = ots
        self._store = TablestoreLeaseStore(ots, status_table)
        self._status_table_seen = False

    def start_worker(self, worker_id: str, options: WorkerOptions | None = None) -> RecordingWorkerProcess:
        chosen = options or WorkerOptions()

        def argv_of(db: Path) -> list[str]:
            return chosen.argv(endpoint=self.endpoint, table=self.table, status_table=self.status_table,
                               worker_id=worker_id, db=db)  # fmt: skip

        worker = RecordingWorkerProcess(worker_id, self.work_dir, argv_of).start()
        self.workers[worker_id] = worker
        return worker

    def journal(self) -> JournalContents:
        return read_journals(w.db for w in self.workers.values())

    def leases(self) -> list[Lease]:
        """Every lease row of the stream (empty until the first worker has created the status table)."""
        if not self._status_table_seen:
            self._status_table_seen = self.status_table in self._ots.list_table()
            if not self._status_table_seen:
                return []
        return self._store.list_leases(self.stream_id)

    def owners(self) -> dict[str, str]:
        """shard id → owner ("" if released) of the leases that are not finished."""
        return {lease.shard_id: lease.owner for lease in self.leases() if not lease.is_finished}

    def counts(self) -> dict[str, int]:
        """Unfinished leases per live owner."""
        result: dict[str, int] = {}
        for owner in self.owners().values():
            if owner:
                result[owner] = result.get(owner, 0) + 1
        return result

    def latest_stats(self, worker_id: str) -> dict[str, int]:
        """The worker's last reported CoordinationStats (reported a few times a second while they change)."""
        events = [e for e in self.journal().events if e.worker == worker_id and e.kind == "stats"]
        return json.loads(events[-1].detail) if events else {}

    def describe(self) -> str:
        """Lease rows and each worker's log tail, for failure messages."""
        parts = ["leases:"] + [f"  {lease.describe()}" for lease in self.leases()]
        for worker in self.workers.values():
            parts += [f"--- {worker.worker_id} (rc={worker.returncode}) log tail:", worker.log_tail()]
        return "\n".join(parts)

    def close(self) -> None:
        for worker in self.workers.values():
            worker.ensure_dead()


# ----- data -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Written:
    pk: str
    version: int
    at: float


class LoadWriter:
    """Writes `limit` rows at about `rate` rows/s on a thread: keys k000.. in turn, each with a rising version."""

    def __init__(self, ots: Any, table: str, *, keys: int = 20, rate: float = 20.0, limit: int = 2000) -> None:
        self._ots = ots
        self._table = table
        self._keys = keys
        self._interval = 1.0 / rate
        self._limit = limit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._written: list[Written] = []
        self.error: BaseException | None = None

    @property
    def written(self) -> list[Written]:
        with self._lock:
            return list(self._written)

    def start(self) -> LoadWriter:
        self._thread = threading.Thread(target=self._run, name="load-writer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Written]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        if self.error is not None:
            raise HarnessError(f"the load writer failed: {self.error!r}") from self.error
        return self.written

    def _run(self) -> None:
        from tablestore import Condition, Row, RowExistenceExpectation

        ignore = Condition(RowExistenceExpectation.IGNORE)
        next_at = time.monotonic()
        try:
            for n in range(self._limit):
                if self._stop.is_set():
                    return
                pk, version = f"k{n % self._keys:03d}", n // self._keys + 1
                self._ots.put_row(self._table, Row([("id", pk)], [(VERSION_COLUMN, version)]), ignore)
                with self._lock:
                    self._written.append(Written(pk, version, time.time()))
                next_at += self._interval
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        except BaseException as exc:
            self.error = exc


def ots_client(endpoint: str) -> Any:
    from cdcbridge.tablestore import build_ots_client

    return build_ots_client(endpoint, INSTANCE, ACCESS_KEY_ID, ACCESS_KEY_SECRET)


def create_sharded_table(ots: Any, admin: EmulatorAdmin, table: str, shards: int) -> tuple[str, list[str]]:
    """The benchmark's table (one STRING key `id`) split until `shards` shards are open."""
    from cdcbridge.tablestore import StreamClient

    return admin.create_sharded_table(StreamClient(ots), table, [("id", "STRING")], shards)


def delivered_all(journal: JournalContents, written: list[Written]) -> bool:
    delivered = {(d.pk, d.version) for d in journal.deliveries}
    return all((w.pk, w.version) in delivered for w in written)


# ----- the benchmark ----------------------------------------------------------------------------------------------


def _first_delivery_after(
    cluster: WorkerCluster, shards: set[str], after: float, by: str, timeout: float, what: str
) -> float:
    """Wall time at which `by` first handed out a record of each of `shards` after `after` (the latest of those)."""

    def latest_first() -> float | None:
        firsts: dict[str, float] = {}
        for d in cluster.journal().deliveries_of(worker=by, shards=shards):
            if d.delivered_at > after and d.shard_id not in firsts:
                firsts[d.shard_id] = d.delivered_at
        return max(firsts.values()) if len(firsts) == len(shards) else None

    return wait_until(latest_first, timeout, what, poll=0.1)


def _held_by(cluster: WorkerCluster, worker_id: str) -> set[str]:
    return {shard for shard, owner in cluster.owners().items() if owner == worker_id}


def _wait_balanced(cluster: WorkerCluster, expected: dict[str, int], timeout: float) -> None:
    wait_until(lambda: cluster.counts() == expected, timeout, f"lease counts {expected} (now {cluster.counts()})")


def _spread(name: str, samples: list[float], goal: float, per: float, per_name: str) -> dict[str, Any]:
    return {
        f"{name}_samples": len(samples),
        f"{name}_seconds_min": round(min(samples), 2),
        f"{name}_seconds_median": round(statistics.median(samples), 2),
        f"{name}_seconds_max": round(max(samples), 2),
        f"{name}_goal_seconds": round(goal, 2),
        f"{name}_max_ratio_to_{per_name}": round(max(samples) / per, 3),
    }


def _failover_and_handoff(
    emulator: EmulatorProcess, ots: Any, work_dir: Path, options: WorkerOptions, settings: CoordinationSettings,
    handoff_samples: int, failover_samples: int, rng: random.Random,
) -> dict[str, Any]:  # fmt: skip
    """Two workers share two shards; the older one is stopped (SIGTERM) or killed (-9), the survivor's takeover of
    its shard timed, a fresh worker joins and balances 1/1 again, and so on for every sample."""
    lease, take = settings.lease_duration_seconds, settings.take_interval_seconds
    slow = 10 * (lease + take) + 60  # generous bounds: the machine is shared
    stream_id, _ = create_sharded_table(ots, emulator.admin, "failover_src", 2)
    cluster = WorkerCluster(work_dir, emulator.url, "failover_src", "failover_status", stream_id, ots)
    load = LoadWriter(ots, "failover_src", keys=20, rate=20, limit=1_000_000).start()
    names = (f"w{n}" for n in itertools.count(1))
    handoffs: list[float] = []
    failovers: list[float] = []
    plan = ["SIGTERM"] * handoff_samples + ["SIGKILL"] * failover_samples
    try:
        leaving = cluster.start_worker(next(names), options).worker_id
        _wait_balanced(cluster, {leaving: 2}, slow)
        peer = cluster.start_worker(next(names), options).worker_id
        _wait_balanced(cluster, {leaving: 1, peer: 1}, slow)
        for n, how in enumerate(plan):
            shards = _held_by(cluster, leaving)
            _first_delivery_after(cluster, shards, time.time(), leaving, slow, f"{leaving} delivering its shard")
            # Balance is reached at a fixed phase of the workers' take cycles; a random pause samples all phases.
            time.sleep(rng.uniform(0, take))
            worker = cluster.workers[leaving]
            signalled_at = worker.send(signal.SIGTERM) if how == "SIGTERM" else worker.kill()
            resumed = _first_delivery_after(cluster, shards, signalled_at, peer, slow, f"{peer} taking over")
            (handoffs if how == "SIGTERM" else failovers).append(resumed - signalled_at)
            worker.wait(slow)
            if n + 1 < len(plan):
                joiner = cluster.start_worker(next(names), options).worker_id
                _wait_balanced(cluster, {peer: 1, joiner: 1}, slow)
                leaving, peer = peer, joiner
        written = load.stop()
        wait_until(lambda: delivered_all(cluster.journal(), written), slow, "every written record delivered")
        deliveries = cluster.journal().deliveries
        redelivered = len(deliveries) - len({(d.pk, d.version) for d in deliveries})
        cluster.workers[peer].send(signal.SIGTERM)
        cluster.workers[peer].wait(slow)
    finally:
        load.stop()
        cluster.close()
    figures: dict[str, Any] = {}
    if failovers:
        figures.update(_spread("failover", failovers, 1.2 * (lease + take), lease + take, "lease_plus_take"))
    if handoffs:
        figures.update(_spread("handoff", handoffs, take, take, "take_interval"))
    figures.update({"records_written": len(written), "records_redelivered": redelivered})
    return figures


def _rebalance(
    emulator: EmulatorProcess, ots: Any, work_dir: Path, options: WorkerOptions, settings: CoordinationSettings,
    quiet_cycles: int,
) -> dict[str, Any]:  # fmt: skip
    lease, take = settings.lease_duration_seconds, settings.take_interval_seconds
    slow = 20 * (lease + take) + 60
    stream_id, _ = create_sharded_table(ots, emulator.admin, "rebalance_src", 8)
    cluster = WorkerCluster(work_dir, emulator.url, "rebalance_src", "rebalance_status", stream_id, ots)
    try:
        cluster.start_worker("a", options)
        _wait_balanced(cluster, {"a": 8}, slow)
        joiner = cluster.start_worker("b", options)
        started = wait_until(
            lambda: next((e.at for e in cluster.journal().events if e.worker == "b" and e.kind == "worker_started"), 0),
            slow, "worker b started",
        )  # fmt: skip
        wait_until(lambda: cluster.counts() == {"a": 4, "b": 4}, slow, "a 4/4 split", poll=0.05)
        converged = time.time() - started
        owners = cluster.owners()
        changes = 0
        quiet_until = time.monotonic() + quiet_cycles * take
        while time.monotonic() < quiet_until:
            now = cluster.owners()
            changes += sum(1 for shard, owner in now.items() if owners.get(shard) != owner)
            owners = now
            time.sleep(0.1)
        time.sleep(0.5)  # let the last stats reports land
        steal_requests = cluster.latest_stats("b").get("steal_requests", 0) + cluster.latest_stats("a").get(
            "steal_requests", 0
        )
        transfers = cluster.latest_stats("a").get("leases_transferred", 0)
        joiner.send(signal.SIGTERM)
        cluster.workers["a"].send(signal.SIGTERM)
        joiner.wait(slow)
        cluster.workers["a"].wait(slow)
    finally:
        cluster.close()
    return {
        "rebalance_shards": 8,
        "rebalance_seconds": round(converged, 2),
        "rebalance_take_cycles": round(converged / take, 2),
        "rebalance_steal_requests": steal_requests,
        "rebalance_transfers": transfers,
        "ownership_changes_after_convergence": changes,
        "quiet_window_seconds": quiet_cycles * take,
    }


def run_failover_bench(
    *, fast: bool = False, handoff_samples: int = 3, failover_samples: int = 2, quiet_cycles: int = 3,
    keep_dir: Path | None = None, seed: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Run the three measurements against a fresh emulator process; returns flat figures for the results file.

    Default timings are the product defaults (20 s leases, 6 s take); `fast` uses the test timings (4 s / 1 s).
    Each hand-off or failover is triggered at a random phase of the peers' take (and the victim's renew) cycle
    (`seed` makes the phases reproducible), hence several samples: min / median / max. Every written record is
    checked to have been delivered (HarnessError if not). Logs and journals go to `keep_dir` if given (kept), else
    to a temporary folder (removed).
    """
    if handoff_samples + failover_samples < 1:
        raise ValueError("run at least one hand-off or failover sample")
    timings = "fast" if fast else "default"
    options = WorkerOptions(timings=timings)
    settings = CoordinationSettings(**(FAST_TIMINGS if fast else {}))
    work_dir = keep_dir or Path(tempfile.mkdtemp(prefix="cdcbridge-failover-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    emulator = EmulatorProcess(work_dir / "emulator.log")
    began = time.monotonic()
    try:
        ots = ots_client(emulator.start().url)
        figures: dict[str, Any] = {
            "timings": timings,
            "lease_duration_seconds": settings.lease_duration_seconds,
            "take_interval_seconds": settings.take_interval_seconds,
            "renew_interval_seconds": settings.renew_interval_seconds,
        }
        figures.update(
            _failover_and_handoff(
                emulator,
                ots,
                work_dir / "failover",
                options,
                settings,
                handoff_samples,
                failover_samples,
                random.Random(seed),
            )
        )
        figures.update(_rebalance(emulator, ots, work_dir / "rebalance", options, settings, quiet_cycles))
        figures["bench_seconds"] = round(time.monotonic() - began, 1)
        return figures
    finally:
        emulator.stop()
        if keep_dir is None:
            shutil.rmtree(work_dir, ignore_errors=True)
