"""The record encoder: the builders + serializer path, its error wording, and the processor's use of it."""

from __future__ import annotations

import pytest

from cdcbridge.bridge.processor import BridgeProcessingError
from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp, MessageFormat
from cdcbridge.coordination.processor import ProcessRecordsInput
from cdcbridge.formats.table_format import BridgeTableFormat
from cdcbridge.publish.record_encoder import RecordEncodeError, RecordEncoder
from tests.unit.bridge.test_processor import FakeCheckpointer, make_fast

ML = MessageFormat.MUTATE_LOG
RI = MessageFormat.RECORD_IMAGE


def delete(i: int) -> ChangeRecord:
    return ChangeRecord("orders", RecordAction.DELETE, [("id", i)], [], Sequence(1, 1_000 + i, 0), "shard-0")


def encoder(serialize, formats=(RI, ML)) -> RecordEncoder:
    table_format = BridgeTableFormat(formats=formats)
    return RecordEncoder(
        table="orders", instance="inst", table_format=table_format, topic_prefix="cdc",
        topics=table_format.topics(prefix="cdc", table="orders"), serialize=serialize,
    )  # fmt: skip


def test_the_builders_path_serializes_every_message_in_sub_sequence_order() -> None:
    def serialize(topic, value):
        return None if value is None else f"{topic}:{value.get('type', 'image')}".encode()

    messages = encoder(serialize).encode(delete(3))
    assert messages == [
        ("cdc.orders.image", RI, b"cdc.orders.image:image"),
        ("cdc.orders.image", RI, None),  # the tombstone
        ("cdc.orders.mutation", ML, b"cdc.orders.mutation:DELETE"),
    ]


def test_a_value_the_schema_refuses_is_named_by_format_table_key_and_topic() -> None:
    def serialize(topic, value):
        raise ValueError("field 'cells' expects an array")

    with pytest.raises(RecordEncodeError) as caught:
        encoder(serialize, (ML,)).encode(delete(3))
    assert str(caught.value) == (
        "cannot serialize the MUTATE_LOG message of table orders key [3] for topic cdc.orders.mutation: "
        "field 'cells' expects an array"
    )


def test_the_processor_adds_the_shard_and_stops_the_batch() -> None:
    processor, sink, _ = make_fast({})

    def refuse(topic, value):
        raise ValueError("bad union branch")

    processor._encoder._serialize = refuse
    record = ChangeRecord("orders", RecordAction.PUT, [("id", 1)], [Cell("v", CellOp.PUT, 1, 5)], Sequence(1, 9, 0))
    with pytest.raises(BridgeProcessingError, match=r"key \[1\] for topic cdc.orders.mutation: bad union branch "
                                                    r"\(shard shard-0\)"):  # fmt: skip
        processor.process_records(ProcessRecordsInput([record], FakeCheckpointer()))
    assert sink.produced == []
