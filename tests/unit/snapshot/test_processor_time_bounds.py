"""The bridge processor's two bounds in time: records before the snapshot start are checkpointed without a message,
records after the end time are neither produced nor checkpointed (not even by a shard end)."""

from __future__ import annotations

import pytest

from cdcbridge.bridge.processor import BridgeContext, BridgeProcessor
from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.coordination.processor import InitializationInput, ProcessRecordsInput, ShutdownInput, ShutdownReason
from cdcbridge.formats.table_format import BridgeTableFormat
from cdcbridge.kafka.sink import Delivery
from cdcbridge.snapshot.errors import SnapshotInProgressError

from .fakes import FakeSink

T0 = 5_000_000


class Checkpointer:
    def __init__(self) -> None:
        self.calls: list[tuple[object, object]] = []
        self.held_open: list[str] = []
        self.largest_permitted_checkpoint = None
        self.last_checkpoint = None

    def checkpoint(self, target=None, sub_sequence=None) -> None:
        self.calls.append((target, sub_sequence))

    def hold_open(self, reason: str) -> None:
        self.held_open.append(reason)


def record(ts: int) -> ChangeRecord:
    return ChangeRecord("orders", RecordAction.PUT, [("id", ts)], [Cell("v", CellOp.PUT, ts, 1)], Sequence(1, ts, 0),
                        "shard-0")  # fmt: skip


def processor(sink: FakeSink, **bounds) -> BridgeProcessor:
    context = BridgeContext(
        table_format=BridgeTableFormat(), table="orders", instance="inst", topic_prefix="cdc",
        serialize=lambda topic, value: value, sink=sink, read_rows=None, checkpoint_interval_seconds=3600, **bounds,
    )  # fmt: skip
    bridge = BridgeProcessor(context)
    bridge.initialize(InitializationInput("stream", "shard-0", (), "TRIM_HORIZON", None))
    return bridge


def test_records_before_the_snapshot_start_are_checkpointed_without_a_message() -> None:
    sink, skipped = FakeSink(ack_when=lambda i: False), []
    bridge = processor(sink, stream_start=lambda: T0, on_skipped=skipped.append)
    checkpointer = Checkpointer()
    batch = [record(T0 - 2), record(T0 - 1), record(T0), record(T0 + 1)]
    bridge.process_records(ProcessRecordsInput(batch, checkpointer))
    assert sink.keys(".mutation") == [f"[{T0}]".encode(), f"[{T0 + 1}]".encode()]
    assert skipped == [2]
    bridge._write_checkpoint(final=False)
    assert checkpointer.calls == [(batch[1].sequence, None)]  # the skipped records count as handled at once
    sink.callbacks[0](Delivery("cdc.orders.mutation", 0, 0, None))
    bridge._write_checkpoint(final=False)
    assert checkpointer.calls[-1] == (batch[2].sequence, None)


def test_a_shard_refuses_to_start_while_its_table_is_being_snapshotted() -> None:
    def running() -> int | None:
        raise SnapshotInProgressError("the snapshot of table orders is still running")

    with pytest.raises(SnapshotInProgressError):
        processor(FakeSink(), stream_start=running)


def test_without_a_snapshot_every_record_is_produced() -> None:
    sink = FakeSink()
    bridge = processor(sink, stream_start=lambda: None)
    bridge.process_records(ProcessRecordsInput([record(1), record(2)], Checkpointer()))
    assert len(sink.messages) == 2


def test_records_after_the_end_time_are_neither_produced_nor_checkpointed() -> None:
    sink = FakeSink()
    bridge = processor(sink, end_time_us=T0)
    checkpointer = Checkpointer()
    bridge.process_records(ProcessRecordsInput([record(T0 - 1), record(T0), record(T0 + 1)], checkpointer))
    bridge.process_records(ProcessRecordsInput([record(T0 + 2)], checkpointer))
    assert sink.keys(".mutation") == [f"[{T0 - 1}]".encode(), f"[{T0}]".encode()]  # up to and including the end
    bridge._write_checkpoint(final=False)
    assert checkpointer.calls == [(record(T0).sequence, None)]
    bridge.shutdown(ShutdownInput(ShutdownReason.SHARD_END, checkpointer, 1.0))
    assert (None, None) not in checkpointer.calls  # no SHARD_END over records it never produced
    assert checkpointer.held_open == ["it closed after the end time; later records are not produced"]


def test_a_shard_that_ends_before_the_end_time_is_finished_as_usual() -> None:
    sink = FakeSink()
    bridge = processor(sink, end_time_us=T0)
    checkpointer = Checkpointer()
    bridge.process_records(ProcessRecordsInput([record(T0 - 1)], checkpointer))
    bridge.shutdown(ShutdownInput(ShutdownReason.SHARD_END, checkpointer, 1.0))
    assert checkpointer.calls[-1] == (None, None)  # checkpoint(): everything handed out, then SHARD_END
    assert checkpointer.held_open == []


def test_skipped_updates_are_not_read_back_for_their_images() -> None:
    from cdcbridge.contract import MessageFormat

    asked: list[list] = []
    sink = FakeSink()
    context = BridgeContext(
        table_format=BridgeTableFormat(formats=(MessageFormat.RECORD_IMAGE,)), table="orders", instance="inst",
        topic_prefix="cdc", serialize=lambda topic, value: value, sink=sink,
        read_rows=lambda table, pks: asked.append(pks) or [{"v": (1, 1)} for _ in pks], stream_start=lambda: T0,
    )  # fmt: skip
    bridge = BridgeProcessor(context)
    bridge.initialize(InitializationInput("stream", "shard-0", (), "TRIM_HORIZON", None))
    updates = [ChangeRecord("orders", RecordAction.UPDATE, [("id", ts)], [Cell("v", CellOp.PUT, 1, 1)],
                            Sequence(1, ts, 0)) for ts in (T0 - 1, T0 + 1)]  # fmt: skip
    bridge.process_records(ProcessRecordsInput(updates, Checkpointer()))
    assert asked == [[[("id", T0 + 1)]]]
    assert sink.keys(".image") == [f"[{T0 + 1}]".encode()]
