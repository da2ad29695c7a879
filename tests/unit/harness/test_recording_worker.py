"""The recording processor and its SQLite journal (what the multi-process tests and the failover bench read)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.errors import LeaseLostError
from cdcbridge.coordination.processor import (
    InitializationInput,
    ProcessRecordsInput,
    ShutdownInput,
    ShutdownReason,
)
from cdcbridge.harness.recording_worker import (
    FAST_TIMINGS,
    JournalWriter,
    RecordingPolicy,
    RecordingProcessor,
    build_settings,
    read_journals,
)


class FakeCheckpointer:
    """Remembers checkpoint calls; refuses them once `lost` is set, as a stale owner's checkpointer does."""

    def __init__(self) -> None:
        self.calls: list[Sequence | None] = []
        self.lost = False
        self.largest: ExtendedSequence | None = None
        self.called = threading.Event()

    def checkpoint(self, target: ChangeRecord | Sequence | None = None, sub_sequence: int | None = None) -> None:
        self.calls.append(target if not isinstance(target, ChangeRecord) else target.sequence)
        self.called.set()
        if self.lost:
            raise LeaseLostError("s1", "the table shows owner other")

    @property
    def largest_permitted_checkpoint(self) -> ExtendedSequence | None:
        return self.largest

    @property
    def last_checkpoint(self) -> ExtendedSequence | None:
        return None


def _record(n: int, key: str = "k1") -> ChangeRecord:
    return ChangeRecord("t", RecordAction.PUT, [("id", key)], [Cell("v", CellOp.PUT, n)], Sequence(1, 1000 + n, 0))


def _processor(tmp_path: Path, policy: RecordingPolicy, worker: str = "w1") -> tuple[RecordingProcessor, Path]:
    db = tmp_path / f"{worker}.sqlite"
    processor = RecordingProcessor(JournalWriter(db, worker), policy)
    processor.initialize(InitializationInput("stream", "s1", (), "TRIM_HORIZON", None))
    return processor, db


def _deliver(processor: RecordingProcessor, checkpointer: FakeCheckpointer, *numbers: int) -> None:
    records = [_record(n) for n in numbers]
    checkpointer.largest = ExtendedSequence(records[-1].sequence)
    processor.process_records(ProcessRecordsInput(records, checkpointer))


def test_batches_are_journaled_and_checkpointed_every_nth_batch(tmp_path: Path) -> None:
    processor, db = _processor(tmp_path, RecordingPolicy(checkpoint_every=2))
    checkpointer = FakeCheckpointer()
    _deliver(processor, checkpointer, 1, 2)
    assert checkpointer.calls == []
    _deliver(processor, checkpointer, 3)
    assert checkpointer.calls == [Sequence(1, 1003, 0)]

    journal = read_journals([db])
    assert [(d.worker, d.shard_id, d.pk, d.version, d.batch) for d in journal.deliveries] == [
        ("w1", "s1", "k1", 1, 1),
        ("w1", "s1", "k1", 2, 1),
        ("w1", "s1", "k1", 3, 2),
    ]
    assert [(c.position, c.ok) for c in journal.checkpoints] == [(ExtendedSequence(Sequence(1, 1003, 0)), True)]
    assert [(e.kind, e.detail) for e in journal.events] == [("initialize", "TRIM_HORIZON")]


def test_a_refused_checkpoint_is_journaled_with_its_error_and_does_not_fail_the_batch(tmp_path: Path) -> None:
    processor, db = _processor(tmp_path, RecordingPolicy())
    checkpointer = FakeCheckpointer()
    checkpointer.lost = True
    _deliver(processor, checkpointer, 1)
    (attempt,) = read_journals([db]).checkpoints
    assert attempt.outcome == "LeaseLostError" and "owner other" in attempt.detail


def test_delayed_acks_confirm_later_and_still_arrive_after_a_lost_lease(tmp_path: Path) -> None:
    """Like Kafka callbacks of messages already sent: the late ack reaches the (refusing) checkpointer."""
    processor, db = _processor(tmp_path, RecordingPolicy(ack_delay_seconds=0.05))
    checkpointer = FakeCheckpointer()
    _deliver(processor, checkpointer, 1, 2)
    assert checkpointer.called.wait(5)
    assert checkpointer.calls == [Sequence(1, 1002, 0)]

    checkpointer.called.clear()
    checkpointer.lost = True
    _deliver(processor, checkpointer, 3)
    processor.shutdown(ShutdownInput(ShutdownReason.LEASE_LOST, checkpointer, 0.0))
    assert checkpointer.called.wait(5)
    deadline = time.monotonic() + 5
    while len(read_journals([db]).checkpoints) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [c.outcome for c in read_journals([db]).checkpoints] == ["ok", "LeaseLostError"]


def test_a_requested_shutdown_drops_pending_acks_and_confirms_everything(tmp_path: Path) -> None:
    processor, db = _processor(tmp_path, RecordingPolicy(ack_delay_seconds=60))
    checkpointer = FakeCheckpointer()
    _deliver(processor, checkpointer, 1, 2)
    processor.shutdown(ShutdownInput(ShutdownReason.REQUESTED, checkpointer, 5.0))
    assert checkpointer.calls == [None]  # checkpoint(): everything handed out
    journal = read_journals([db])
    assert [(c.position, c.outcome) for c in journal.checkpoints] == [(ExtendedSequence(Sequence(1, 1002, 0)), "ok")]
    assert ("shutdown", "REQUESTED") in [(e.kind, e.detail) for e in journal.events]


def test_journals_of_several_processes_read_as_one_timeline(tmp_path: Path) -> None:
    first, db1 = _processor(tmp_path, RecordingPolicy(), "w1")
    second, db2 = _processor(tmp_path, RecordingPolicy(), "w2")
    _deliver(first, FakeCheckpointer(), 1)
    _deliver(second, FakeCheckpointer(), 2)
    _deliver(first, FakeCheckpointer(), 3)
    journal = read_journals([db1, db2, tmp_path / "never-started.sqlite"])
    assert [(d.worker, d.version) for d in journal.deliveries] == [("w1", 1), ("w2", 2), ("w1", 3)]
    assert [d.version for d in journal.deliveries_of(worker="w1", shards=["s1"])] == [1, 3]


def test_settings_use_fast_or_default_timings_plus_overrides() -> None:
    fast = build_settings("status", "fast", {"take_interval_seconds": 2.0})
    assert fast.lease_duration_seconds == FAST_TIMINGS["lease_duration_seconds"]
    assert fast.take_interval_seconds == 2.0 and fast.status_table == "status"
    default = build_settings("status", "default", {})
    assert (default.lease_duration_seconds, default.take_interval_seconds) == (20.0, 6.0)
    with pytest.raises(ValueError, match="renew_interval_seconds"):
        build_settings("status", "fast", {"renew_interval_seconds": 10.0})
