"""The processor gives the same messages whichever way a page is laid out: the C page encoder for plain records,
the builders + serializer for the rest (odd keys, records before the snapshot start, a resumed record)."""

from __future__ import annotations

from typing import Any

import pytest

from cdcbridge.bridge.processor import BridgeContext, BridgeProcessor
from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp, MessageFormat
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.processor import InitializationInput, ProcessRecordsInput
from cdcbridge.formats.errors import InvalidRecordError
from cdcbridge.formats.fast_envelopes import FastFormat
from cdcbridge.formats.schemas import parsed_schema
from cdcbridge.formats.table_format import BridgeTableFormat

from ..formats.test_fast_envelopes import _framed, c_module
from .test_processor import FakeCheckpointer, FakeSink

ML, RI = MessageFormat.MUTATE_LOG, MessageFormat.RECORD_IMAGE
SCHEMA_ID = 11
SCHEMAS = {"cdc.orders.mutation": parsed_schema(ML), "cdc.orders.image": parsed_schema(RI)}


@pytest.fixture(autouse=True, scope="module")
def _c_on() -> None:
    c_module()


def serialize(topic: str, value: dict | None) -> bytes | None:
    """What confluent-kafka's AvroSerializer writes for the topic's schema, registered as SCHEMA_ID."""
    return None if value is None else _framed(SCHEMAS[topic], value, SCHEMA_ID)


def processor(fast: bool, start_us: int | None = None) -> tuple[BridgeProcessor, FakeSink]:
    sink = FakeSink()
    formats = (RI, ML)
    encoders = {f: FastFormat(f, "inst", SCHEMA_ID) for f in formats} if fast else {}
    context = BridgeContext(
        table_format=BridgeTableFormat(formats=formats), table="orders", instance="inst", topic_prefix="cdc",
        serialize=serialize, sink=sink, read_rows=lambda table, pks: [{"v": ("row", 5)} for _ in pks],
        checkpoint_interval_seconds=3600, fast_encoders=encoders,
        stream_start=None if start_us is None else (lambda: start_us),
    )  # fmt: skip
    bridge = BridgeProcessor(context)
    bridge.initialize(InitializationInput("stream", "shard-0", (), "TRIM_HORIZON", None))
    return bridge, sink


def page() -> list[ChangeRecord]:
    def rec(i: int, action: RecordAction, pk: Any, cells: list[Cell]) -> ChangeRecord:
        return ChangeRecord("orders", action, [("id", pk)], cells, Sequence(1, 1_000 + i, 0), "")

    return [
        rec(0, RecordAction.PUT, 0, [Cell("v", CellOp.PUT, "a", 1)]),
        rec(1, RecordAction.UPDATE, 1, [Cell("v", CellOp.PUT, 2, None), Cell("n", CellOp.INCREMENT, 3, None)]),
        rec(2, RecordAction.PUT, b"\x00bin", [Cell("v", CellOp.PUT, 1.5, 3)]),  # a bytes key: the Python path
        rec(3, RecordAction.DELETE, 3, []),  # image, tombstone, mutation
        rec(4, RecordAction.PUT, 'quote"d', [Cell("v", CellOp.PUT, b"\x01", 4)]),  # an escaped key: Python path
        rec(5, RecordAction.PUT, 5, [Cell("v", CellOp.PUT, 2**63, 5)]),  # a value the schema refuses: builders
        rec(6, RecordAction.UPDATE, 6, [Cell("v", CellOp.DELETE_ALL_VERSION, None, None)]),
    ]


def produced(sink: FakeSink) -> list[tuple[Any, ...]]:
    pairs = zip(sink.produced, sink.headers, strict=True)
    return [(topic, key, value, headers) for (topic, key, value, _), headers in pairs]


def run(fast: bool, **kwargs: Any) -> tuple[list[tuple[Any, ...]], FakeCheckpointer, FakeSink, BridgeProcessor]:
    bridge, sink = processor(fast, kwargs.pop("start_us", None))
    checkpointer = FakeCheckpointer()
    records = page()
    records[5].cells = [Cell("v", CellOp.PUT, 5, 5)]  # keep the page encodable: the refusal is tested apart
    bridge.process_records(ProcessRecordsInput(records, checkpointer, **kwargs))
    return produced(sink), checkpointer, sink, bridge


def test_the_c_page_path_produces_what_the_builders_produce() -> None:
    fast, _, fast_sink, _ = run(True)
    slow, _, _, _ = run(False)
    assert fast == slow
    assert len(fast) == 16  # 2 per record, 3 for the delete
    assert fast_sink.produced_counts == {"cdc.orders.image": 8, "cdc.orders.mutation": 8}


def test_same_messages_when_resuming_part_way_and_after_a_snapshot_start() -> None:
    resume = ExtendedSequence(Sequence(1, 1_003, 0), 1)  # the delete's image and tombstone went out before
    assert run(True, resume_point=resume)[0] == run(False, resume_point=resume)[0]
    fast, *_ = run(True, start_us=1_002)
    assert fast == run(False, start_us=1_002)[0]
    keys = [b'[{"b64":"AGJpbg=="}]', b"[3]", b"[3]", b'["quote\\"d"]', b"[5]", b"[6]"]
    assert [key for _, key, _, _ in fast][::2] == keys


def test_the_page_checkpoints_by_record_and_sub_sequence_and_counts_acks_per_page() -> None:
    messages, checkpointer, sink, bridge = run(True)
    for index in range(8):  # records 0-2 (2, 3 and 2 messages: the update's mutations are two runs), the delete's image
        sink.ack(index)
    bridge._write_checkpoint(final=False)
    assert checkpointer.calls == [(Sequence(1, 1_003, 0), 0)]
    assert sink.acked_counts == {}  # a page is counted once all of it is acknowledged
    for index in range(7, len(messages)):
        sink.ack(index)
    bridge._write_checkpoint(final=False)
    assert checkpointer.calls[-1] == (Sequence(1, 1_006, 0), None)
    assert sink.acked_counts == {"cdc.orders.image": 8, "cdc.orders.mutation": 8}


def test_a_record_the_builders_refuse_stops_the_page_before_anything_is_produced() -> None:
    bridge, sink = processor(True)
    with pytest.raises(InvalidRecordError, match=r"table 'orders' column 'v': 9223372036854775808 does not fit"):
        bridge.process_records(ProcessRecordsInput(page(), FakeCheckpointer()))
    assert sink.produced == []  # nothing of a page that cannot be encoded is produced
