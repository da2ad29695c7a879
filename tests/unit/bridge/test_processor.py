"""The bridge processor with the real message builders and in-process fakes for Kafka and the checkpointer."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from cdcbridge.bridge.processor import BridgeContext, BridgeProcessingError, BridgeProcessor
from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import TOMBSTONE_SEQ_KEY_HEADER, CellOp, MessageFormat
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.processor import (
    InitializationInput,
    ProcessRecordsInput,
    ShutdownInput,
    ShutdownReason,
)
from cdcbridge.formats.table_format import BridgeTableFormat
from cdcbridge.kafka.errors import MessageTooLargeError
from cdcbridge.kafka.sink import Delivery


class FakeMessage:
    """The part of librdkafka's Message a delivery report handler reads."""

    def __init__(self, topic: str, latency: float | None = 0.002) -> None:
        self._topic, self._latency = topic, latency

    def topic(self) -> str:
        return self._topic

    def latency(self) -> float | None:
        return self._latency


class FakeSink:
    """Records what is produced; a test acknowledges or fails message `index` with ack(index, error)."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, bytes, object, object]] = []
        self.headers: list[object] = []
        self.tracked: list[bool] = []
        self.produced_counts: Counter[str] = Counter()
        self.acked_counts: Counter[str] = Counter()

    def produce(self, topic, key, value, on_ack, headers=None) -> None:
        self.produced.append((topic, key, value, on_ack))
        self.headers.append(headers)
        self.tracked.append(False)

    def produce_tracked(self, topic, key, value, on_delivery, headers=None) -> None:
        self.produced.append((topic, key, value, on_delivery))
        self.headers.append(headers)
        self.tracked.append(True)

    def delivery_error(self, error, message):
        return error  # the tests fail messages with our own errors already

    def count_produced(self, counts) -> None:
        self.produced_counts.update(counts)

    def count_acked(self, counts, latencies) -> None:
        self.acked_counts.update(counts)

    def ack(self, index: int, error: Exception | None = None) -> None:
        topic, _, _, callback = self.produced[index]
        if self.tracked[index]:
            callback(error, FakeMessage(topic))
        else:
            callback(Delivery(topic, 0, index, error))


class FakeCheckpointer:
    def __init__(self) -> None:
        self.calls: list[tuple[object, object]] = []
        self.largest_permitted_checkpoint = None
        self.last_checkpoint = None

    def checkpoint(self, target=None, sub_sequence=None) -> None:
        self.calls.append((target, sub_sequence))


def record(i: int, action: RecordAction = RecordAction.PUT, cells: list[Cell] | None = None) -> ChangeRecord:
    cells = cells if cells is not None else [Cell("v", CellOp.PUT, i, 1000 + i)]
    return ChangeRecord("orders", action, [("id", i)], cells, Sequence(1, 1_000_000 + i, 0), "shard-0")


def make(formats: tuple[MessageFormat, ...] = (MessageFormat.MUTATE_LOG,)) -> tuple[BridgeProcessor, FakeSink]:
    sink = FakeSink()
    context = BridgeContext(
        table_format=BridgeTableFormat(formats=formats), table="orders", instance="inst", topic_prefix="cdc",
        serialize=lambda topic, value: None if value is None else repr(sorted(value)).encode(), sink=sink,
        read_rows=lambda table, pks: [None for _ in pks], checkpoint_interval_seconds=3600,
    )  # fmt: skip
    processor = BridgeProcessor(context)
    processor.initialize(InitializationInput("stream", "shard-0", (), "TRIM_HORIZON", None))
    return processor, sink


def test_messages_are_produced_keyed_in_order_and_checkpointed_only_after_acks() -> None:
    processor, sink = make()
    checkpointer = FakeCheckpointer()
    records = [record(i) for i in range(3)]
    processor.process_records(ProcessRecordsInput(records, checkpointer))
    assert [(t, k) for t, k, _, _ in sink.produced] == [("cdc.orders.mutation", f"[{i}]".encode()) for i in range(3)]
    processor._write_checkpoint(final=False)
    assert checkpointer.calls == []  # nothing acknowledged yet
    sink.ack(1)
    processor._write_checkpoint(final=False)
    assert checkpointer.calls == []  # record 0 is still in flight
    sink.ack(0)
    processor._write_checkpoint(final=False)
    assert checkpointer.calls == [(records[1].sequence, None)]
    processor._write_checkpoint(final=False)
    assert len(checkpointer.calls) == 1  # unchanged position is not written again


def test_a_record_with_several_messages_is_checkpointed_with_its_sub_sequence() -> None:
    processor, sink = make((MessageFormat.RECORD_IMAGE, MessageFormat.MUTATE_LOG))
    checkpointer = FakeCheckpointer()
    rec = record(1, RecordAction.DELETE, [])
    processor.process_records(ProcessRecordsInput([rec], checkpointer))
    topics = [t for t, _, _, _ in sink.produced]
    assert topics == ["cdc.orders.image", "cdc.orders.image", "cdc.orders.mutation"]  # image, tombstone, mutation
    assert sink.produced[1][2] is None  # the tombstone, carrying the delete's seq_key for the apply job
    assert sink.headers[1] == [(TOMBSTONE_SEQ_KEY_HEADER, rec.sequence.key(0).encode())]
    assert sink.headers[0] is None and sink.headers[2] is None
    sink.ack(0)
    processor._write_checkpoint(final=False)
    assert checkpointer.calls == [(rec.sequence, 0)]


def test_resume_part_way_skips_the_confirmed_parts() -> None:
    processor, sink = make((MessageFormat.RECORD_IMAGE, MessageFormat.MUTATE_LOG))
    rec = record(1, RecordAction.DELETE, [])
    resume = ExtendedSequence(rec.sequence, 0)
    processor.process_records(ProcessRecordsInput([rec], FakeCheckpointer(), resume_point=resume))
    assert [t for t, _, _, _ in sink.produced] == ["cdc.orders.image", "cdc.orders.mutation"]
    assert sink.produced[0][2] is None  # parts 1 (tombstone) and 2 (mutation) only


def test_a_delivery_failure_freezes_the_checkpoint_and_restarts_the_shard() -> None:
    processor, sink = make()
    checkpointer = FakeCheckpointer()
    records = [record(i) for i in range(3)]
    processor.process_records(ProcessRecordsInput(records, checkpointer))
    sink.ack(0)
    sink.ack(1, MessageTooLargeError("message for key '[1]' on topic cdc.orders.mutation is 2000000 bytes"))
    sink.ack(2)
    processor._write_checkpoint(final=False)
    assert checkpointer.calls == [(records[0].sequence, None)]  # never past the failed message
    with pytest.raises(BridgeProcessingError, match=r"shard shard-0 of table orders restarts .* key '\[1\]'"):
        processor.process_records(ProcessRecordsInput([record(3)], checkpointer))


def test_shard_end_waits_for_every_acknowledgement_before_confirming() -> None:
    processor, sink = make()
    checkpointer = FakeCheckpointer()
    processor.process_records(ProcessRecordsInput([record(0), record(1)], checkpointer))
    done = threading.Event()

    def shut() -> None:
        processor.shutdown(ShutdownInput(ShutdownReason.SHARD_END, checkpointer, None))
        done.set()

    threading.Thread(target=shut).start()
    time.sleep(0.2)
    assert not done.is_set() and checkpointer.calls == []
    sink.ack(0)
    sink.ack(1)
    assert done.wait(5)
    assert checkpointer.calls[-1] == (None, None)  # checkpoint(): everything handed out


def test_lease_lost_never_checkpoints() -> None:
    processor, sink = make()
    checkpointer = FakeCheckpointer()
    processor.process_records(ProcessRecordsInput([record(0)], checkpointer))
    sink.ack(0)
    processor.shutdown(ShutdownInput(ShutdownReason.LEASE_LOST, checkpointer, None))
    assert checkpointer.calls == []


def test_requested_stop_checkpoints_what_was_acknowledged_within_the_timeout() -> None:
    processor, sink = make()
    checkpointer = FakeCheckpointer()
    records = [record(0), record(1)]
    processor.process_records(ProcessRecordsInput(records, checkpointer))
    sink.ack(0)
    processor.shutdown(ShutdownInput(ShutdownReason.REQUESTED, checkpointer, 0.1))
    assert checkpointer.calls == [(records[0].sequence, None)]


# ------------------------------------------------------------------------------ the fast MUTATE_LOG path


def make_fast(
    encoders: dict, formats: tuple[MessageFormat, ...] = (MessageFormat.MUTATE_LOG,)
) -> tuple[BridgeProcessor, FakeSink, list]:
    sink = FakeSink()
    serialized: list = []

    def serialize(topic, value):
        serialized.append(topic)
        return None if value is None else b"slow:" + repr(sorted(value)).encode()

    context = BridgeContext(
        table_format=BridgeTableFormat(formats=formats), table="orders", instance="inst", topic_prefix="cdc",
        serialize=serialize, sink=sink, read_rows=lambda table, pks: [{"v": ("row", 5)} for _ in pks],
        checkpoint_interval_seconds=3600, fast_encoders=encoders,
    )  # fmt: skip
    processor = BridgeProcessor(context)
    processor.initialize(InitializationInput("stream", "shard-0", (), "TRIM_HORIZON", None))
    return processor, sink, serialized


def two_parts(rec: ChangeRecord, current_row=None) -> list[bytes]:
    return [f"fast:{rec.sequence.timestamp_us}:{part}:{rec.shard_id}".encode() for part in range(2)]


ML = MessageFormat.MUTATE_LOG
RI = MessageFormat.RECORD_IMAGE


def test_the_fast_path_produces_its_values_keyed_and_checkpoints_by_sub_sequence() -> None:
    processor, sink, serialized = make_fast({ML: two_parts})
    checkpointer = FakeCheckpointer()
    rec = record(7)
    rec.shard_id = ""  # the processor fills the shard in before encoding
    processor.process_records(ProcessRecordsInput([rec], checkpointer))
    assert [(t, k, v) for t, k, v, _ in sink.produced] == [
        ("cdc.orders.mutation", b"[7]", b"fast:1000007:0:shard-0"),
        ("cdc.orders.mutation", b"[7]", b"fast:1000007:1:shard-0"),
    ]
    assert serialized == []  # the library serializer was not needed
    sink.ack(0)
    processor._write_checkpoint(final=False)
    assert checkpointer.calls == [(rec.sequence, 0)]  # part 1 is still in flight
    sink.ack(1)
    processor._write_checkpoint(final=False)
    assert checkpointer.calls[-1] == (rec.sequence, None)


def test_the_fast_path_resumes_part_way_like_the_builders() -> None:
    processor, sink, _ = make_fast({ML: two_parts})
    rec = record(7)
    processor.process_records(
        ProcessRecordsInput([rec], FakeCheckpointer(), resume_point=ExtendedSequence(rec.sequence, 0))
    )
    assert [v for _, _, v, _ in sink.produced] == [b"fast:1000007:1:shard-0"]


def test_records_the_fast_path_declines_take_the_builders() -> None:
    processor, sink, serialized = make_fast(
        {ML: lambda rec, row: None if rec.sequence.timestamp_us % 2 else two_parts(rec)}
    )
    processor.process_records(ProcessRecordsInput([record(1), record(2)], FakeCheckpointer()))
    values = [v for _, _, v, _ in sink.produced]
    assert values[0].startswith(b"slow:") and values[1:] == two_parts(record(2))
    assert serialized == ["cdc.orders.mutation"]


def test_the_fast_path_needs_an_encoder_for_every_format_of_the_table() -> None:
    calls: list = []
    processor, sink, _ = make_fast({ML: lambda rec, row: calls.append(rec) or two_parts(rec)}, (RI, ML))
    processor.process_records(ProcessRecordsInput([record(1)], FakeCheckpointer()))
    assert calls == []
    assert [t for t, _, _, _ in sink.produced] == ["cdc.orders.image", "cdc.orders.mutation"]


def test_fast_images_and_mutations_are_numbered_in_format_order_with_the_tombstone_header() -> None:
    seen_rows: list = []

    def image(rec, current_row):
        seen_rows.append(current_row)
        return [b"image", None] if rec.action is RecordAction.DELETE else [b"image"]

    processor, sink, serialized = make_fast({RI: image, ML: two_parts}, (RI, ML))
    checkpointer = FakeCheckpointer()
    update = record(1, RecordAction.UPDATE)
    delete = record(2, RecordAction.DELETE, [])
    processor.process_records(ProcessRecordsInput([update, delete], checkpointer))
    assert seen_rows == [{"v": ("row", 5)}, None]  # the UPDATE's row read back is handed to the image encoder
    assert [(t, v) for t, _, v, _ in sink.produced] == [
        ("cdc.orders.image", b"image"),
        ("cdc.orders.mutation", two_parts(update)[0]),
        ("cdc.orders.mutation", two_parts(update)[1]),
        ("cdc.orders.image", b"image"),
        ("cdc.orders.image", None),
        ("cdc.orders.mutation", two_parts(delete)[0]),
        ("cdc.orders.mutation", two_parts(delete)[1]),
    ]
    assert sink.headers[4] == [(TOMBSTONE_SEQ_KEY_HEADER, delete.sequence.key(0).encode())]
    assert [h for i, h in enumerate(sink.headers) if i != 4] == [None] * 6
    assert serialized == []
    for index in (0, 1, 2, 3, 4):
        sink.ack(index)
    processor._write_checkpoint(final=False)
    assert checkpointer.calls == [(delete.sequence, 1)]  # image and tombstone of the delete out, mutations not


def test_one_declining_encoder_sends_the_whole_record_through_the_builders() -> None:
    processor, sink, serialized = make_fast({RI: lambda rec, row: None, ML: two_parts}, (RI, ML))
    processor.process_records(ProcessRecordsInput([record(1)], FakeCheckpointer()))
    assert [v[:5] for _, _, v, _ in sink.produced] == [b"slow:", b"slow:"]
    assert serialized == ["cdc.orders.image", "cdc.orders.mutation"]
