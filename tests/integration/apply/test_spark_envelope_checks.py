"""The compiled envelope checks (MutationOp.java, ImageOp.java) against the reference path's: on envelopes with
random flaws, Spark takes a message as an operation exactly when :func:`~cdcbridge.apply.core.operations.decode_message`
accepts it, so everything the reference path would refuse reaches it (and is raised or dead-lettered there)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcbridge.apply.core.operations import decode_message
from cdcbridge.apply.driver.kafka_records import envelope
from cdcbridge.apply.errors import BadInputError
from cdcbridge.apply.spark.decode import decoded_records
from cdcbridge.apply.spark.operations import OP, PYTHON, normalized_operations
from cdcbridge.contract import MessageFormat
from tests.unit.apply.envelopes import delete_all, delete_one, image, increment, mutation, put

from .interpreted import without_generated_code
from .kafka_frames import KAFKA_SCHEMA, SCHEMAS, framed, kafka_row, routing

Flaw = Callable[[dict[str, Any]], None]
LARGEST_TIMESTAMP_KEY = f"{1:010d}{2**63 - 1:020d}{0:010d}{0:06d}"


def _seq(**numbers: Any) -> Flaw:
    return lambda message: message["seq"].update(numbers)


def _first_cell(**fields: Any) -> Flaw:
    return lambda message: message["cells"][0].update(fields) if message["cells"] else None


def _first_column(**fields: Any) -> Flaw:
    def flaw(message: dict[str, Any]) -> None:
        for column in message["columns"].values():
            column.update(fields)
            return

    return flaw


COMMON_FLAWS: dict[str, Flaw] = {
    "empty table": lambda m: m["source"].update(table=""),
    "no pk": lambda m: m.update(pk=[]),
    "empty pk name": lambda m: m["pk"][:1] and m["pk"][0].update(name=""),
    "pk name twice": lambda m: m["pk"][:1] and m.update(pk=[m["pk"][0], {**m["pk"][0], "value": 9}]),
    "letter in seq_key": lambda m: m["seq"].update(seq_key="x" + m["seq"]["seq_key"][1:]),
    "short seq_key": lambda m: m["seq"].update(seq_key=m["seq"]["seq_key"][1:]),
    "seq_key with a newline": lambda m: m["seq"].update(seq_key=m["seq"]["seq_key"][:-1] + "\n"),
    "seq_key of other numbers": _seq(op_index=3),
    "negative epoch": _seq(epoch=-1),
    "epoch wider than its field": _seq(epoch=10**10),
    "op_index wider than its field": _seq(op_index=10**6),
    "largest timestamp_us": lambda m: m["seq"].update(timestamp_us=2**63 - 1, seq_key=LARGEST_TIMESTAMP_KEY),
}
MUTATION_FLAWS: dict[str, Flaw] = {
    "unknown type": lambda m: m.update(type="UNKNOWN"),
    "DELETE without row_deleted": lambda m: m.update(type="DELETE", row_deleted=False, cells=[]),
    "row_deleted on an UPDATE": lambda m: m.update(row_deleted=True, cells=[]),
    "DELETE with cells": lambda m: m.update(type="DELETE", row_deleted=True, replace_row=False),
    "replace_row on an UPDATE": lambda m: m.update(type="UPDATE", replace_row=True),
    "empty cell name": _first_cell(name=""),
    "unknown cell op": _first_cell(op="UNKNOWN"),
    "PUT without value": _first_cell(op="PUT", value=None, amount=None),
    "DELETE_ONE_VERSION without version": _first_cell(op="DELETE_ONE_VERSION", version=None, amount=None),
    "INCREMENT without value or amount": _first_cell(op="INCREMENT", value=None, amount=None),
    "INCREMENT to a text": _first_cell(op="INCREMENT", value="seven", amount=None),
    "amount on a PUT": _first_cell(op="PUT", value=1, amount=2),
    "amount on a DELETE_ALL_VERSION": _first_cell(op="DELETE_ALL_VERSION", value=None, amount=2),
}
IMAGE_FLAWS: dict[str, Flaw] = {
    "row_deleted with columns": lambda m: m.update(row_deleted=True),
    "row_deleted and partial": lambda m: m.update(row_deleted=True, partial=True, columns={}),
    "empty column name": lambda m: m["columns"].update({"": {"value": 1, "version": None}}),
    "null in a full image": _first_column(value=None),
    "null in a partial image": lambda m: (m.update(partial=True), _first_column(value=None)(m)),
}

MUTATIONS = [
    mutation(1, "UPDATE", [put("a", 5), increment("n", 2), delete_one("b", 4), delete_all("c")]),
    mutation(2, "PUT", [put("a", "x", 9), put("b", b"\x00", None)]),
    mutation(3, "INCREMENT", [increment("n", value=7, version=3)]),
    mutation(4, "DELETE"),
]
IMAGES = [
    image(1, {"a": (5, 1), "b": ("x", None), "c": (1.5, 2), "d": (True, 3)}),
    image(2, {"a": (b"\x01", 4)}, partial=True),
    image(3, row_deleted=True),
]


@st.composite
def flawed_batches(draw: st.DrawFn) -> tuple[MessageFormat, list[tuple[dict, dict]]]:
    """One format's envelopes (valid, as sent), each sent valid or with 1-2 random flaws."""
    message_format = draw(st.sampled_from([MessageFormat.MUTATE_LOG, MessageFormat.RECORD_IMAGE]))
    valid, own = (MUTATIONS, MUTATION_FLAWS) if message_format is MessageFormat.MUTATE_LOG else (IMAGES, IMAGE_FLAWS)
    flaws = {**COMMON_FLAWS, **own}
    messages = []
    for _ in range(draw(st.integers(1, 12))):
        original = draw(st.sampled_from(valid))
        message = copy.deepcopy(original)
        for name in draw(st.lists(st.sampled_from(sorted(flaws)), max_size=2)):
            flaws[name](message)
        messages.append((original, message))
    return message_format, messages


def flawed_frame(spark: Any, message_format: MessageFormat, pairs: list[tuple[dict, dict]]) -> Any:
    """A batch of (valid, flawed) envelopes: each message keyed as the valid one, its value the flawed one."""
    rows = []
    for offset, (valid, flawed) in enumerate(pairs):
        key, _, topic, partition, _, *rest = kafka_row(message_format, valid, 0, offset)
        rows.append((key, bytearray(framed(message_format, flawed)), topic, partition, offset, *rest))
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def reference_accepts(frame: Any) -> list[bool]:
    """Per message, in offset order: the reference path decodes it as a valid operation."""
    accepted = []
    for record in sorted(decoded_records(frame, SCHEMAS), key=lambda r: r.offset):
        try:
            decode_message(envelope(record), message_format=record.message_format)
        except BadInputError:
            accepted.append(False)
        else:
            accepted.append(True)
    return accepted


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=flawed_batches())
def test_spark_takes_exactly_the_envelopes_the_reference_path_accepts(spark, batch) -> None:
    message_format, messages = batch
    frame = flawed_frame(spark, message_format, messages)
    normalized = normalized_operations(frame, SCHEMAS, routing(message_format), {})
    classes = [row["_class"] for row in normalized.select("_class").collect()]
    assert set(classes) <= {OP, PYTHON}
    assert [kind == OP for kind in classes] == reference_accepts(frame)


def test_every_flaw_alone_is_left_to_the_reference_path(spark) -> None:
    """Each flaw on its own (except the two that keep an envelope valid) sends its message to the reference path,
    which refuses it: the lists above are flaws, not noise."""
    still_valid = {"largest timestamp_us", "null in a partial image"}
    for message_format, valid, own in (
        (MessageFormat.MUTATE_LOG, MUTATIONS[0], MUTATION_FLAWS),
        (MessageFormat.RECORD_IMAGE, IMAGES[0], IMAGE_FLAWS),
    ):
        names = sorted({**COMMON_FLAWS, **own})
        messages = []
        for name in names:
            message = copy.deepcopy(valid)
            {**COMMON_FLAWS, **own}[name](message)
            messages.append((valid, message))
        frame = flawed_frame(spark, message_format, messages)
        normalized = normalized_operations(frame, SCHEMAS, routing(message_format), {})
        classes = [row["_class"] for row in normalized.collect()]
        expected = [OP if name in still_valid else PYTHON for name in names]
        assert dict(zip(names, classes, strict=True)) == dict(zip(names, expected, strict=True))
        assert reference_accepts(frame) == [name in still_valid for name in names]


def test_the_envelope_checks_give_the_same_operations_without_generated_code(spark) -> None:
    """MutationOp and ImageOp evaluated row by row (``eval``) classify and build every operation as their
    generated code does, valid and flawed envelopes alike."""
    for message_format, valid, own in (
        (MessageFormat.MUTATE_LOG, MUTATIONS, MUTATION_FLAWS),
        (MessageFormat.RECORD_IMAGE, IMAGES, IMAGE_FLAWS),
    ):
        messages = [(message, message) for message in valid]
        for _, flaw in sorted({**COMMON_FLAWS, **own}.items()):
            message = copy.deepcopy(valid[0])
            flaw(message)
            messages.append((valid[0], message))
        frame = flawed_frame(spark, message_format, messages)
        generated = operations(frame, message_format)
        with without_generated_code(spark):
            assert operations(frame, message_format) == generated
        assert sum(row["_class"] == OP for row in generated) >= len(valid)


def operations(frame: Any, message_format: MessageFormat) -> list[Any]:
    """The class, table, key and operation of each message of `frame`."""
    normalized = normalized_operations(frame, SCHEMAS, routing(message_format), {})
    return normalized.select("_class", "table", "pk", "op").collect()
