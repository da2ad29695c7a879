"""The worker (KCL Scheduler): wires renewer, taker, shard syncer and shard consumers together.

States (§5.3): INITIALIZING (status table, first shard sync, adopt our own leases) → RUNNING → DRAINING (stop
requested: every consumer drains, checkpoints and releases) → STOPPED; FENCED when no renewal or take reached the
store for `no_progress_abort_seconds` (every consumer is aborted without checkpointing).

`run_once` is one deterministic pass (what tests drive with a FakeClock); `run` loops it with the renewer on its own
thread so a slow scan or sync never delays renewals.
"""

from __future__ import annotations

import logging
import random
import threading
from concurrent.futures import Executor
from enum import StrEnum

from cdcbridge.coordination.clock import Clock, SystemClock
from cdcbridge.coordination.errors import CoordinationError, WorkerFencedError
from cdcbridge.coordination.executors import bounded_pool
from cdcbridge.coordination.leases.held import HeldLease, HeldLeases
from cdcbridge.coordination.leases.renewer import LeaseRenewer
from cdcbridge.coordination.leases.shard_syncer import ShardSyncer
from cdcbridge.coordination.leases.store import LeaseStore
from cdcbridge.coordination.leases.taker import LeaseTaker
from cdcbridge.coordination.leases.taker_policy import LeaseTakerPolicy
from cdcbridge.coordination.lifecycle.incarnation import ShardContext
from cdcbridge.coordination.lifecycle.shard_consumer import ShardConsumer
from cdcbridge.coordination.processor import RecordProcessorFactory, ShutdownReason
from cdcbridge.coordination.settings import CoordinationSettings
from cdcbridge.coordination.stats import CoordinationStats
from cdcbridge.coordination.stream.access import StreamAccess
from cdcbridge.coordination.trim_policy import ContinueAfterTrim, TrimPolicy

log = logging.getLogger(__name__)


class WorkerState(StrEnum):
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    DRAINING = "DRAINING"
    STOPPED = "STOPPED"
    FENCED = "FENCED"


class Worker:
    """One process's share of a stream: holds leases and runs a consumer per held shard."""

    def __init__(
        self,
        *,
        worker_id: str,
        stream_id: str,
        store: LeaseStore,
        stream: StreamAccess,
        processor_factory: RecordProcessorFactory,
        settings: CoordinationSettings | None = None,
        clock: Clock | None = None,
        executor: Executor | None = None,
        rng: random.Random | None = None,
        trim_policy: TrimPolicy | None = None,
    ) -> None:
        if not worker_id:
            raise ValueError("worker_id must be a non-empty string, unique per running process")
        self.worker_id = worker_id
        self.stream_id = stream_id
        self.settings = settings or CoordinationSettings()
        self.clock = clock or SystemClock()
        self.stats = CoordinationStats()
        self.state = WorkerState.INITIALIZING
        self._store = store
        self._stream = stream
        self._factory = processor_factory
        self._trim_policy = trim_policy or ContinueAfterTrim()
        self._owns_executor = executor is None
        self._executor = executor or bounded_pool(self.settings.max_consumer_threads)
        # Reads ahead run on their own threads: a shard task waiting for its page must never wait behind tasks. An
        # injected (test) executor means deterministic runs: pages are then read when asked for.
        self._read_ahead = (
            bounded_pool(self.settings.max_consumer_threads, "cdcbridge-read-ahead")
            if executor is None and self.settings.read_ahead
            else None
        )
        self.held = HeldLeases()
        s = self.settings
        self.renewer = LeaseRenewer(store, self.held, worker_id, self.clock, s, self.stats)
        policy = LeaseTakerPolicy(s.lease_duration_seconds, s.steals_per_cycle, rng)
        self.taker = LeaseTaker(store, self.held, worker_id, stream_id, self.clock, policy, self.stats)
        self.syncer = ShardSyncer(store, stream, stream_id, self.stats)
        self._consumers: dict[int, ShardConsumer] = {}
        self._sync_requested = threading.Event()
        self._stop_requested = threading.Event()
        self._wake = threading.Event()
        self._renew_in_thread = False
        self._next_renew = self._next_take = self._next_sync = 0.0
        self._drain_deadline = 0.0

    # ----- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """INITIALIZING: ensure the status table, sync shards, adopt leases a previous run of this id left."""
        self._store.ensure_table()
        self.syncer.sync()
        self.renewer.adopt(self._store.list_leases(self.stream_id))
        now = self.clock.monotonic()
        self.renewer.last_contact_at = self.taker.last_contact_at = now
        self._next_renew = now + self.settings.renew_interval_seconds
        self._next_take = now
        self._next_sync = now + self.settings.shard_sync_interval_seconds
        self.state = WorkerState.RUNNING
        log.info("worker %s running on stream %s", self.worker_id, self.stream_id)

    def request_stop(self) -> None:
        """Graceful stop (SIGTERM): drain, checkpoint and release every lease, then STOPPED."""
        self._stop_requested.set()
        self._wake.set()

    def request_sync(self) -> None:
        """Run a shard sync at the next pass (after a SHARD_END, or when a parent lease is missing)."""
        if not self._sync_requested.is_set():
            self.stats.add("forced_syncs")
        self._sync_requested.set()

    def run_once(self) -> WorkerState:
        """One pass: due renew / take / sync, then every consumer advances. Returns the state afterwards."""
        if self.state in (WorkerState.STOPPED, WorkerState.FENCED, WorkerState.INITIALIZING):
            return self.state
        now = self.clock.monotonic()
        if self._stop_requested.is_set() and self.state is WorkerState.RUNNING:
            self.state = WorkerState.DRAINING
            self._drain_deadline = now + self.settings.handoff_timeout_seconds + self.settings.renew_interval_seconds
            log.info("worker %s stopping: draining %d shard(s)", self.worker_id, len(self._consumers))
        if not self._renew_in_thread and now >= self._next_renew:
            self.renew_now()
        if self.state is WorkerState.RUNNING:
            if now >= self._next_take:
                self.taker.take_leases()
                self._next_take = now + self.settings.take_interval_seconds
            if now >= self._next_sync or self._sync_requested.is_set():
                self._sync_requested.clear()
                self.syncer.try_sync()
                self._next_sync = now + self.settings.shard_sync_interval_seconds
        if self._is_fenced(now):
            self._fence()
            return self.state
        self._dispatch()
        if self.state is WorkerState.DRAINING and (not self._consumers or now >= self._drain_deadline):
            self._finish_stop()
        return self.state

    def renew_now(self) -> None:
        """One renewal cycle (normally on its timer)."""
        self.renewer.renew_all()
        self._next_renew = self.clock.monotonic() + self.settings.renew_interval_seconds

    def run(self, stop: threading.Event | None = None) -> None:
        """Run until stopped (returns) or fenced (raises WorkerFencedError). `stop` being set = request_stop."""
        self.start()
        self._renew_in_thread = True
        renew_stop = threading.Event()
        renewer = threading.Thread(target=self._renew_loop, args=(renew_stop,), name="cdcbridge-renewer", daemon=True)
        renewer.start()
        try:
            while True:
                self._wake.clear()  # before the pass: a task ending during it wakes the wait below at once
                if self.run_once() in (WorkerState.STOPPED, WorkerState.FENCED):
                    break
                if stop is not None and stop.is_set():
                    self.request_stop()
                self.clock.wait(self._wake, self._next_pass_in())
        finally:
            renew_stop.set()
            renewer.join(timeout=self.settings.renew_interval_seconds + 1)
            if self._owns_executor:  # queued shutdown notifications still run; nothing waits for them
                self._executor.shutdown(wait=False, cancel_futures=False)
            if self._read_ahead is not None:  # pages read ahead are no longer wanted
                self._read_ahead.shutdown(wait=False, cancel_futures=True)
        if self.state is WorkerState.FENCED:
            raise WorkerFencedError(
                f"worker {self.worker_id}: no lease renewal or take reached the status table for "
                f"{self.settings.no_progress_abort_seconds:.0f} s; aborted all shards without checkpointing"
            )

    # ----- inspection -----------------------------------------------------------------------------------------

    def consumers(self) -> list[ShardConsumer]:
        return list(self._consumers.values())

    def held_shard_ids(self) -> set[str]:
        return self.held.shard_ids()

    # ----- internals ------------------------------------------------------------------------------------------

    def _next_pass_in(self) -> float:
        """Seconds until the next timed pass: the loop interval, or sooner when a shard's back-off ends first."""
        interval = self.settings.worker_loop_interval_seconds
        due = [at for consumer in self._consumers.values() if (at := consumer.due_at) is not None]
        if not due:
            return interval
        return min(interval, max(0.0, min(due) - self.clock.monotonic()))

    def _renew_loop(self, stop: threading.Event) -> None:
        while not stop.is_set() and self.state not in (WorkerState.STOPPED, WorkerState.FENCED):
            try:
                self.renew_now()
            except Exception:  # the renewer must survive anything a store may throw
                log.exception("lease renewal cycle failed")
            self.clock.wait(stop, self.settings.renew_interval_seconds)

    def _dispatch(self) -> None:
        known = {c.token for c in self._consumers.values()}
        if self.state is WorkerState.RUNNING:
            for held in self.held.active():
                if held.token not in known:
                    consumer = ShardConsumer(self._context(held), self._executor, self.request_sync, self._wake.set)
                    self._consumers[held.token] = consumer
        for token, consumer in list(self._consumers.items()):
            held = consumer.held
            if self.state is WorkerState.DRAINING:
                consumer.request_shutdown(ShutdownReason.REQUESTED)
            elif held.stealer:
                consumer.request_shutdown(ShutdownReason.STOLEN)
            consumer.tick()
            if consumer.done:
                del self._consumers[token]
                held.mark_ended("consumer ended")
                self._forget(held)
        for held in self.held.all():
            if held.ended is not None and held.token not in self._consumers:
                self._forget(held)

    def _forget(self, held: HeldLease) -> None:
        """Drop an ended acquisition; counting lost leases here counts each exactly once."""
        if (held.ended or "").startswith("lost"):
            self.stats.add("leases_lost")
        self.held.remove(held)

    def _context(self, held: HeldLease) -> ShardContext:
        return ShardContext(
            held=held,
            stream_id=self.stream_id,
            store=self._store,
            stream=self._stream,
            processor_factory=self._factory,
            settings=self.settings,
            clock=self.clock,
            stats=self.stats,
            listed_shards=self.syncer.listed_shards,
            read_ahead=self._read_ahead,
            trim_policy=self._trim_policy,
        )

    def _is_fenced(self, now: float) -> bool:
        if self.state is WorkerState.DRAINING and not self.held.active():
            return False  # nothing left to prove ownership of; the drain finishes on its own
        last = max(self.renewer.last_contact_at, self.taker.last_contact_at)
        return now - last >= self.settings.no_progress_abort_seconds

    def _fence(self) -> None:
        log.error(
            "worker %s FENCED: the status table has not answered for %.0f s; aborting every shard without checkpoints",
            self.worker_id,
            self.settings.no_progress_abort_seconds,
        )
        for held in self.held.all():
            held.mark_ended("lost: worker fenced")
        for consumer in self._consumers.values():
            consumer.request_shutdown(ShutdownReason.LEASE_LOST)
            consumer.tick()
        self.state = WorkerState.FENCED

    def _finish_stop(self) -> None:
        """Release whatever is still held (consumers that overran the drain deadline), then STOPPED."""
        for held in self.held.active():
            try:
                held.write(self.clock, self._store.release, ends_with="released (worker stopped)")
                self.stats.add("leases_released")
            except CoordinationError as exc:
                log.warning("lease %s not released on stop: %s", held.shard_id, exc)
        self.state = WorkerState.STOPPED
        log.info("worker %s stopped", self.worker_id)


def run_worker(
    *,
    store: LeaseStore,
    stream: StreamAccess,
    processor_factory: RecordProcessorFactory,
    settings: CoordinationSettings,
    worker_id: str,
    stream_id: str,
    stop: threading.Event | None = None,
    clock: Clock | None = None,
) -> None:
    """Run one worker until `stop` is set (graceful) or it is fenced (raises WorkerFencedError).

    The entry point for `cdcbridge run` and for multi-process tests: everything it needs is passed in.
    """
    Worker(
        worker_id=worker_id,
        stream_id=stream_id,
        store=store,
        stream=stream,
        processor_factory=processor_factory,
        settings=settings,
        clock=clock,
    ).run(stop)
