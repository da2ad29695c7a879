"""The driver's own decode of a small batch (fastavro) against real Spark's (framing, ``from_avro``, compact JSON):
the same Kafka rows give the same records: equal envelope dicts for both formats (valid and flawed envelopes,
bytes, NaN and infinities, partial images, an evolved writer schema), the same tombstones with their seq header,
and the same problems for values that do not decode (one difference: a body that runs out mid-field is a struct of
nulls on Spark, which the core then refuses, and a value that does not decode on the driver; bad input either way)."""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import fastavro
import pytest

from cdcbridge.apply.core.operations import decode_message
from cdcbridge.apply.driver.kafka_fetch import FetchedMessage
from cdcbridge.apply.driver.kafka_records import KafkaRecord, envelope
from cdcbridge.apply.driver.value_decode import EnvelopeDecoder
from cdcbridge.apply.errors import BadInputError
from cdcbridge.apply.spark.decode import decoded_records
from cdcbridge.apply.writer_schemas import WriterSchema
from cdcbridge.contract import MessageFormat
from tests.unit.apply.envelopes import delete_all, delete_one, image, increment, mutation, put
from tests.unit.apply_job.compact import evolved_writer, same

from .kafka_frames import KAFKA_SCHEMA, SCHEMAS, framed, kafka_row
from .test_spark_envelope_checks import COMMON_FLAWS, IMAGE_FLAWS, IMAGES, MUTATION_FLAWS, MUTATIONS

EVOLVED_ID = 3


SCHEMAS_WITH_EVOLVED = {
    **SCHEMAS,
    EVOLVED_ID: WriterSchema(EVOLVED_ID, json.dumps(evolved_writer()), MessageFormat.MUTATE_LOG),
    4: WriterSchema(4, None, None, "schema id 4 is unknown to the registry"),
}


def _values() -> list[tuple[MessageFormat, dict[str, Any], bytes | None]]:
    """(format, envelope the key comes from, value bytes) per message: valid envelopes, each with every flaw, special
    values, an evolved writer, tombstones and values that do not decode."""
    out: list[tuple[MessageFormat, dict[str, Any], bytes | None]] = []
    specials = [
        mutation(
            5,
            "PUT",
            [
                put("n", float("nan"), 1),
                put("i", float("inf"), 1),
                put("z", -0.0, 1),
                put("b", b"\xff\x00", None),
                put("t", "ü\u2028", 2),
                put("l", -(2**63), 2),
            ],
        ),
        mutation(
            6,
            "UPDATE",
            [increment("c", -3, value=4, version=6), delete_one("x", 5), delete_all("y")],
            pk=(("r", "eu"), ("id", b"\x01")),
            op_index=2,
        ),
        image(7, {"n": (float("-inf"), 1), "f": (False, None), "s": ("", 3)}),
        image(8, {"gone": (None, 8)}, partial=True, pk=(("id", 2**62),)),
    ]
    for message_format, valid, flaws in (
        (MessageFormat.MUTATE_LOG, [*MUTATIONS, *specials[:2]], {**COMMON_FLAWS, **MUTATION_FLAWS}),
        (MessageFormat.RECORD_IMAGE, [*IMAGES, *specials[2:]], {**COMMON_FLAWS, **IMAGE_FLAWS}),
    ):
        for message in valid:
            out.append((message_format, message, framed(message_format, message)))
            for flaw in flaws.values():
                flawed = copy.deepcopy(message)
                flaw(flawed)
                out.append((message_format, message, framed(message_format, flawed)))  # keyed as the valid one
    for old, changes in (
        (mutation(9, "UPDATE", [put("a", 1.25, 9), put("b", b"\xe1", 9)], pk=(("id", b"\xe1\x00"),)), {"note": "x"}),
        (mutation(10, "UPDATE", [put("s", "text", 9)]), {"type": "UPSERT"}),
    ):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, fastavro.parse_schema(evolved_writer()), {**old, **changes})
        out.append((MessageFormat.MUTATE_LOG, old, b"\x00" + EVOLVED_ID.to_bytes(4, "big") + buffer.getvalue()))
    good = framed(MessageFormat.MUTATE_LOG, MUTATIONS[0])
    for broken in (
        b"\x00\x01",
        b"\x07" + good[1:],
        good[:5] + b"\xff\xff",
        good[:-2],
        b"\x00\x00\x00\x00\x04" + good[5:],
    ):
        out.append((MessageFormat.MUTATE_LOG, MUTATIONS[0], broken))
    out.append((MessageFormat.RECORD_IMAGE, {**image(10, row_deleted=True), "_tombstone": True}, None))
    out.append((MessageFormat.RECORD_IMAGE, {**image(11, row_deleted=True), "_tombstone": True, "seq": None}, None))
    return out


def _rows() -> list[tuple]:
    rows = []
    for offset, (message_format, message, value) in enumerate(_values()):
        row = list(kafka_row(message_format, message, 0, offset))
        row[1] = bytearray(value) if value is not None else None
        rows.append(tuple(row))
    return rows


def _fetched(row: tuple) -> FetchedMessage:
    key, value, topic, partition, offset, _, _, headers = row
    return FetchedMessage(topic, partition, offset, bytes(key), bytes(value) if value is not None else None,
                          tuple((name, bytes(data)) for name, data in headers))  # fmt: skip


def _outcome(record: KafkaRecord) -> tuple:
    if record.tombstone:
        return ("tombstone", record.key, record.seq_key_header)
    if not record.has_envelope:
        return ("problem", record.problem, record.raw, record.key)
    return ("envelope", record.message_format, record.key, envelope(record))


def test_the_driver_decodes_every_value_as_spark_does(spark) -> None:
    rows = _rows()
    frame = spark.createDataFrame(rows, KAFKA_SCHEMA)
    on_spark = sorted(decoded_records(frame, SCHEMAS_WITH_EVOLVED, at_once=True), key=lambda r: r.offset)
    on_driver = list(EnvelopeDecoder().records([_fetched(row) for row in rows], SCHEMAS_WITH_EVOLVED))
    assert [r.offset for r in on_spark] == [r.offset for r in on_driver] == list(range(len(rows)))
    kinds = {"tombstone": 0, "problem": 0, "envelope": 0, "nulls on Spark": 0}
    for spark_record, driver_record in zip(on_spark, on_driver, strict=True):
        expected, actual = _outcome(spark_record), _outcome(driver_record)
        if spark_record.body == "{}":
            # A body that runs out mid-field: Spark's PERMISSIVE from_avro gives a struct of nulls, which the core
            # refuses as bad input; the driver says the value does not decode and keeps its bytes for the letter.
            with pytest.raises(BadInputError):
                decode_message(envelope(spark_record), message_format=spark_record.message_format)
            assert actual[0] == "problem" and "does not decode as Avro with writer schema id 1" in actual[1]
            assert actual[2] == bytes(rows[spark_record.offset][1])
            kinds["nulls on Spark"] += 1
            continue
        kinds[expected[0]] += 1
        assert same(list(actual), list(expected)), (spark_record.offset, actual, expected)
    assert kinds == {"tombstone": 2, "problem": 3, "envelope": kinds["envelope"], "nulls on Spark": 2}
    assert kinds["envelope"] > 200
