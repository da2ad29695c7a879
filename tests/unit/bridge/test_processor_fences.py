"""The bridge processor as a shard owner of an incremental snapshot's chunk: it produces up to the first in-range
record after the fence and holds the rest (the checkpoint stays before them), reports once what came before is
acknowledged, and produces the held records in order once the chunk is emitted — against the fake status table."""

from __future__ import annotations

import dataclasses

from cdcbridge.bridge.processor import BridgeContext, BridgeProcessor
from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp, MessageFormat
from cdcbridge.coordination.clock import FakeClock
from cdcbridge.coordination.processor import InitializationInput, ProcessRecordsInput, ShutdownInput, ShutdownReason
from cdcbridge.formats.table_format import BridgeTableFormat
from cdcbridge.snapshot.errors import SnapshotStateError
from cdcbridge.snapshot.fences import SnapshotFences
from cdcbridge.snapshot.incremental_state import ChunkState, IncrementalChunk, IncrementalSnapshotStore
from tests.unit.bridge.test_processor import FakeCheckpointer, FakeSink
from tests.unit.snapshot.fakes import STATUS, STREAM, source_with_rows

MARGIN_US = 1_000_000


class AutoAckSink(FakeSink):
    """Acknowledges each message as it is produced while `auto` is set."""

    auto = False

    def produce_tracked(self, topic, key, value, on_delivery, headers=None) -> None:
        super().produce_tracked(topic, key, value, on_delivery, headers)
        if self.auto:
            self.ack(len(self.produced) - 1)


class Fixture:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.now_us = int(self.clock.wall() * 1_000_000)
        self.store = IncrementalSnapshotStore(source_with_rows(0), STATUS)
        self.fences = SnapshotFences(self.store, STREAM, "orders", refresh_seconds=1.0, exporter_timeout_seconds=15.0,
                                     clock=self.clock)  # fmt: skip
        self.sink = AutoAckSink()
        context = BridgeContext(
            table_format=BridgeTableFormat(formats=(MessageFormat.MUTATE_LOG,)), table="orders", instance="inst",
            topic_prefix="cdc", serialize=lambda topic, value: repr(sorted(value)).encode(), sink=self.sink,
            read_rows=None, checkpoint_interval_seconds=3600, fences=self.fences, fence_margin_us=MARGIN_US,
        )  # fmt: skip
        self.processor = BridgeProcessor(context)
        self.processor.initialize(InitializationInput(STREAM, "shard-a", (), "TRIM_HORIZON", None))
        self.checkpointer = FakeCheckpointer()
        snapshot = self.store.claim(self.store.request(STREAM, "orders", now_ms=1), "exporter-a", 2)
        self.window, self.fence = self.now_us - 1_000_000, self.now_us + 2_000_000
        announced = IncrementalChunk(STREAM, snapshot.snapshot_id, 1, self.window, None, begin=[("id", 10)])
        self.store.open_chunk(snapshot, announced)
        self.chunk = self.store.set_fence(announced, self.fence, [("id", 20)])

    def rec(self, key: int, offset_us: int) -> ChangeRecord:
        return ChangeRecord("orders", RecordAction.PUT, [("id", key)], [Cell("v", CellOp.PUT, key)],
                            Sequence(0, self.fence + offset_us, 0), "shard-a")  # fmt: skip

    def process(self, records: list[ChangeRecord]) -> None:
        self.processor.process_records(ProcessRecordsInput(records, self.checkpointer))

    def produced_keys(self) -> list[bytes]:
        return [key for _, key, _, _ in self.sink.produced]

    def reports(self):
        return self.store.read_reports(STREAM, self.chunk.snapshot_id, self.chunk.number)


def test_the_shard_holds_at_the_first_in_range_record_after_the_fence_and_goes_on_once_the_chunk_is_emitted() -> None:
    f = Fixture()
    records = [f.rec(12, -500), f.rec(3, +10), f.rec(15, +20), f.rec(4, +30)]
    f.process(records)
    assert f.produced_keys() == [b"[12]", b"[3]"], "15 after the fence is held, and 4 behind it"
    assert f.processor.holding is not None and "chunk 1" in f.processor.holding
    f.process([f.rec(16, +40)])
    assert f.produced_keys() == [b"[12]", b"[3]"], "later records queue behind the held one"

    f.processor._send_reports()
    assert f.reports() == [], "record 12 (before the pass) is not acknowledged yet"
    f.sink.ack(0)
    f.processor._send_reports()
    (report,) = f.reports()
    assert (report.shard_id, report.passed, report.dirty_keys) == ("shard-a", True, ([("id", 12)],))
    f.sink.ack(1)
    f.processor._write_checkpoint(final=False)
    assert f.checkpointer.calls == [(records[1].sequence, None)], "the checkpoint stays before the held record"

    f.processor.on_idle()
    assert len(f.sink.produced) == 2, "the chunk is still open"
    f.store.close_chunk(f.chunk, ChunkState.EMITTED, 5)
    f.clock.advance(1.0)
    f.processor.on_idle()
    assert f.produced_keys() == [b"[12]", b"[3]", b"[15]", b"[4]", b"[16]"], "released in shard order"
    assert f.processor.holding is None


def test_an_idle_shard_reports_once_its_clock_passed_the_fence() -> None:
    f = Fixture()
    f.process([f.rec(11, -100)])
    f.sink.ack(0)
    f.processor.on_idle()
    assert f.reports() == [], "the fence is still ahead of this host's clock"
    f.clock.advance(3.0 + 0.001)  # past F + m
    f.processor.on_idle()
    (report,) = f.reports()
    assert report.dirty_keys == ([("id", 11)],)


def test_a_dead_exporter_releases_the_hold() -> None:
    f = Fixture()
    f.process([f.rec(15, +1)])
    assert f.produced_keys() == []
    f.clock.advance(15.5)
    f.processor.on_idle()
    assert f.produced_keys() == [b"[15]"], "the exporter's heartbeat did not change for 15 s"


def test_a_shard_that_ends_while_it_holds_produces_the_held_records_before_its_end() -> None:
    f = Fixture()
    f.process([f.rec(15, +1), f.rec(2, +2)])
    f.store.close_chunk(f.chunk, ChunkState.ABANDONED, 5)
    f.clock.advance(1.0)
    f.sink.auto = True
    assert f.produced_keys() == []
    f.processor.shutdown(ShutdownInput(ShutdownReason.SHARD_END, f.checkpointer, 5.0))
    assert f.produced_keys() == [b"[15]", b"[2]"]
    assert f.checkpointer.calls == [(None, None)], "then the whole shard is checkpointed (its end)"


def test_the_checkpoint_waits_for_the_report_when_a_successor_would_miss_the_dirty_keys() -> None:
    f = Fixture()
    records = [f.rec(3, -900), f.rec(12, -500), f.rec(4, -400)]
    f.process(records)
    for index in range(3):
        f.sink.ack(index)
    f.processor._write_checkpoint(final=False)
    assert f.checkpointer.calls == [(records[0].sequence, None)], "not past 12 before the report is stored"
    f.process([f.rec(5, +10)])  # after the fence: passed
    f.sink.ack(3)
    f.processor._send_reports()
    assert len(f.reports()) == 1
    f.processor._write_checkpoint(final=False)
    assert f.checkpointer.calls[-1][0].timestamp_us == f.fence + 10, "the report is stored: the cap is lifted"


def test_a_shard_that_ends_reports_on_the_open_chunk_before_its_end_is_checkpointed() -> None:
    f = Fixture()
    f.sink.auto = True
    f.process([f.rec(12, -500)])
    assert f.reports() == [], "not passed: the fence is ahead"
    reports_at_checkpoint: list[int] = []
    checkpoint = f.checkpointer.checkpoint
    f.checkpointer.checkpoint = lambda *args: (reports_at_checkpoint.append(len(f.reports())), checkpoint(*args))
    f.processor.shutdown(ShutdownInput(ShutdownReason.SHARD_END, f.checkpointer, 5.0))
    (report,) = f.reports()
    assert report.dirty_keys == ([("id", 12)],)
    assert f.checkpointer.calls == [(None, None)] and reports_at_checkpoint == [1], "reported, then the end"


def test_a_shard_end_that_cannot_report_in_time_fails_instead_of_checkpointing_its_end() -> None:
    import pytest

    from cdcbridge.bridge.processor import BridgeProcessingError

    f = Fixture()
    f.sink.auto = True
    f.process([f.rec(12, -500)])
    f.clock.advance(1.0)  # the next view is read again ...
    f.fences._store._client.fail_next("GetRange", OSError("status table unreachable"))
    f.fences.report = lambda report: (_ for _ in ()).throw(SnapshotStateError("unreachable"))  # ... and reports fail
    with pytest.raises(BridgeProcessingError, match="not all its reports on open snapshot chunks were stored"):
        f.processor.shutdown(ShutdownInput(ShutdownReason.SHARD_END, f.checkpointer, 0.3))
    assert f.checkpointer.calls == [], "the end is not checkpointed"


def test_a_shard_past_the_end_time_passes_every_open_chunk() -> None:
    f = Fixture()
    f.sink.auto = True
    f.processor._context = dataclasses.replace(f.processor._context, end_time_us=f.fence - 100)
    f.process([f.rec(12, -500), f.rec(13, -50)])
    assert f.produced_keys() == [b"[12]"], "13 is after the end time"
    (report,) = f.reports()
    assert report.dirty_keys == ([("id", 12)],), "nothing more comes from this shard in this run"
