"""Test doubles for coordination: a recording processor and a simulated cluster in fake time."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from cdcbridge.changes import ChangeRecord, Sequence
from cdcbridge.coordination import (
    CoordinationSettings,
    FakeClock,
    InMemoryLeaseStore,
    RecordProcessor,
    ShutdownReason,
    Worker,
)
from cdcbridge.coordination.checkpoint.positions import SHARD_END
from cdcbridge.coordination.errors import CoordinationError, ProcessorNotReadyError
from cdcbridge.coordination.executors import InlineExecutor
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.processor import (
    InitializationInput,
    ProcessRecordsInput,
    RecordProcessorCheckpointer,
    ShutdownInput,
)
from cdcbridge.coordination.stream.simulator import StreamSimulator
from cdcbridge.coordination.trim_policy import TrimPolicy

STREAM = "stream-1"


@dataclass(frozen=True)
class Delivery:
    worker: str
    shard_id: str
    key: str
    value: object
    sequence: Sequence
    at: float


@dataclass
class Journal:
    """Everything every processor saw, shared by the processors of a test."""

    clock: FakeClock
    deliveries: list[Delivery] = field(default_factory=list)
    shutdowns: list[tuple[str, str, ShutdownReason]] = field(default_factory=list)
    initialized: list[tuple[str, InitializationInput]] = field(default_factory=list)
    #: Processors' shutdown(SHARD_END / STOLEN / REQUESTED) raise while set (acks failing).
    fail_shutdowns: bool = False
    #: Whether a non-auto-ack processor confirms its pending records when shut down (a flush that succeeds);
    #: when False, acks only arrive when the test calls `ack`.
    ack_on_shutdown: bool = True
    #: (worker, sequence, first unconfirmed sub-sequence) for records delivered part-way confirmed.
    partial_resumes: list[tuple[str, Sequence, int]] = field(default_factory=list)
    #: Called on every delivery (for invariant checks at the moment of delivery).
    on_delivery: Callable[[Delivery], None] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: While set, processors' initialize() raises ProcessorNotReadyError (e.g. a snapshot still runs).
    not_ready: bool = False
    #: While set, processors keep their shard unfinished at its end (hold_open, as past bridge.end_time).
    hold_at_shard_end: bool = False

    def record(self, delivery: Delivery) -> None:
        with self.lock:
            self.deliveries.append(delivery)
        if self.on_delivery is not None:
            self.on_delivery(delivery)

    def delivered_sequences(self, shard_id: str | None = None) -> list[Sequence]:
        return [d.sequence for d in self.deliveries if shard_id is None or d.shard_id == shard_id]

    def by_key(self) -> dict[str, list[object]]:
        out: dict[str, list[object]] = {}
        for d in self.deliveries:
            out.setdefault(d.key, []).append(d.value)
        return out


class RecordingProcessor(RecordProcessor):
    """Records deliveries. With `auto_ack` it checkpoints after each batch; otherwise records wait in `pending`
    until the test acknowledges them (like Kafka delivery callbacks), possibly from another thread."""

    def __init__(self, journal: Journal, worker_id: str, *, auto_ack: bool = True) -> None:
        self.journal = journal
        self.worker_id = worker_id
        self.auto_ack = auto_ack
        self.shard_id = ""
        self.pending: list[ChangeRecord] = []
        self.checkpointer: RecordProcessorCheckpointer | None = None
        self.fail_shutdown = False
        self.fail_process = False
        self.shutdown_reasons: list[ShutdownReason] = []
        self.checkpoint_errors: list[Exception] = []
        #: How often an empty read called on_idle; with `fail_idle` on_idle raises.
        self.idle_calls = 0
        self.fail_idle = False

    def on_idle(self) -> None:
        self.idle_calls += 1
        if self.fail_idle:
            raise RuntimeError("injected on_idle failure")

    def initialize(self, initialization: InitializationInput) -> None:
        self.shard_id = initialization.shard_id
        if self.journal.not_ready:
            raise ProcessorNotReadyError("the table's snapshot is still running")
        with self.journal.lock:
            self.journal.initialized.append((self.worker_id, initialization))

    def process_records(self, records: ProcessRecordsInput) -> None:
        if self.fail_process:
            raise RuntimeError("injected processor failure")
        self.checkpointer = records.checkpointer
        for record in records.records:
            if records.start_sub_sequence(record):
                self.journal.partial_resumes.append(
                    (self.worker_id, record.sequence, records.start_sub_sequence(record))
                )
            self.journal.record(
                Delivery(
                    self.worker_id,
                    record.shard_id,
                    str(record.primary_key[0][1]),
                    record.cells[0].value,
                    record.sequence,
                    self.journal.clock.monotonic(),
                )
            )
        if self.auto_ack:
            records.checkpointer.checkpoint()
        else:
            self.pending.extend(records.records)

    def ack(self, count: int | None = None) -> None:
        """Confirm the oldest `count` pending records (all if None) by checkpointing the last of them."""
        if not self.pending or self.checkpointer is None:
            return
        count = len(self.pending) if count is None else count
        done, self.pending = self.pending[:count], self.pending[count:]
        try:
            self.checkpointer.checkpoint(done[-1])
        except CoordinationError as exc:
            self.checkpoint_errors.append(exc)

    def shutdown(self, shutdown: ShutdownInput) -> None:
        self.shutdown_reasons.append(shutdown.reason)
        with self.journal.lock:
            self.journal.shutdowns.append((self.worker_id, self.shard_id, shutdown.reason))
        if self.fail_shutdown or (self.journal.fail_shutdowns and shutdown.reason.checkpoints_allowed):
            raise RuntimeError("injected shutdown failure (acks failed)")
        if shutdown.reason.checkpoints_allowed and shutdown.reason is not ShutdownReason.FAILED:
            if self.auto_ack:
                shutdown.checkpointer.checkpoint()
            elif self.journal.ack_on_shutdown:
                self.ack()
        if shutdown.reason is ShutdownReason.SHARD_END and self.journal.hold_at_shard_end:
            shutdown.checkpointer.hold_open("records after the end time")


def fast_settings(**overrides: object) -> CoordinationSettings:
    """Default timings (20 s lease, 6 s renew/take) unless overridden; tests run them in fake time."""
    base: dict[str, object] = {"idle_fetch_interval_seconds": 0.5, "task_retry_backoff_seconds": 1.0}
    base.update(overrides)
    return CoordinationSettings(**base)  # type: ignore[arg-type]


class Cluster:
    """Several workers on one in-memory store and stream simulator, driven in fake time, tasks run inline."""

    def __init__(
        self,
        settings: CoordinationSettings | None = None,
        seed: int = 0,
        *,
        auto_ack: bool = True,
        shard_count: int = 1,
    ) -> None:
        self.clock = FakeClock()
        self.settings = settings or fast_settings()
        self.store = InMemoryLeaseStore(clock=self.clock)
        self.stream = StreamSimulator(STREAM, shard_count=shard_count)
        self.journal = Journal(self.clock)
        self.workers: dict[str, Worker] = {}
        self.processors: dict[str, list[RecordingProcessor]] = {}
        self.auto_ack = auto_ack
        self._seed = seed

    def add_worker(
        self, worker_id: str, *, start: bool = True, auto_ack: bool | None = None, trim_policy: TrimPolicy | None = None
    ) -> Worker:
        ack = self.auto_ack if auto_ack is None else auto_ack

        def factory() -> RecordingProcessor:
            processor = RecordingProcessor(self.journal, worker_id, auto_ack=ack)
            self.processors.setdefault(worker_id, []).append(processor)
            return processor

        worker = Worker(
            worker_id=worker_id,
            stream_id=STREAM,
            store=self.store,
            stream=self.stream,
            processor_factory=factory,
            settings=self.settings,
            clock=self.clock,
            executor=InlineExecutor(),
            rng=random.Random(f"{self._seed}-{worker_id}"),
            trim_policy=trim_policy,
        )
        self.workers[worker_id] = worker
        if start:
            worker.start()
        return worker

    def crash(self, worker_id: str) -> Worker:
        """kill -9: the worker just stops running; nothing is released."""
        return self.workers.pop(worker_id)

    def step(self, seconds: float = 1.0, only: list[str] | None = None) -> None:
        self.clock.advance(seconds)
        for worker_id, worker in list(self.workers.items()):
            if only is None or worker_id in only:
                worker.run_once()

    def run_for(self, seconds: float, dt: float = 1.0, only: list[str] | None = None) -> None:
        steps = round(seconds / dt)
        for _ in range(steps):
            self.step(dt, only)

    def run_until(self, condition: Callable[[], bool], limit: float = 600.0, dt: float = 1.0) -> float:
        """Step until `condition()`; returns the simulated seconds it took (fails after `limit`)."""
        start = self.clock.monotonic()
        while not condition():
            if self.clock.monotonic() - start > limit:
                raise AssertionError(f"condition not reached within {limit} simulated seconds")
            self.step(dt)
        return self.clock.monotonic() - start

    def leases(self) -> dict[str, Lease]:
        return {lease.shard_id: lease for lease in self.store.list_leases(STREAM)}

    def owners(self) -> dict[str, str]:
        return {sid: lease.owner for sid, lease in self.leases().items()}

    def counts(self) -> dict[str, int]:
        out = {wid: 0 for wid in self.workers}
        for lease in self.leases().values():
            if not lease.is_finished and lease.owner in out:
                out[lease.owner] += 1
        return out

    def all_processors(self) -> list[RecordProcessor]:
        return [p for ps in self.processors.values() for p in ps]

    def finished(self, shard_id: str) -> bool:
        lease = self.leases().get(shard_id)
        return lease is not None and lease.checkpoint == SHARD_END
