"""What the driver receives per Kafka message, and how it becomes the envelope dict the pure core decodes.

A small batch is read and decoded on the driver itself (:mod:`.value_decode`): its records carry the envelope dict
already (``decoded``). Otherwise Spark does the heavy part (framing check, ``from_avro`` into our reader schema, union
flattening) and hands the driver one :class:`KafkaRecord` per message with the envelope as compact JSON (short field
names, each Avro union as a one-key object: ``{"l": 5}``, ``{"b": "<base64>"}``), because Python parses JSON far faster
than it builds nested Spark ``Row`` objects. This module turns that JSON back into the DESIGN §6 field names, with the
message's topic/partition/offset attached so every error and dead letter names it. Nothing here imports Spark.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdcbridge.apply.core.operations import tombstone_message
from cdcbridge.apply.errors import MessageLocation, UndecodableMessageError
from cdcbridge.contract import MessageFormat
from cdcbridge.formats.errors import KeyDecodeError
from cdcbridge.formats.keys import decode_key

#: Compact JSON field → envelope field (common to both formats).
_COMMON = (("s", "seq"), ("d", "row_deleted"))


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One Kafka message as collected from a micro-batch.

    ``body`` is the compact JSON of the envelope Spark decoded, or ``decoded`` the envelope dict the driver decoded
    itself (DESIGN §6 names, without the message's location); both None for a tombstone or an undecodable value.
    ``message_format`` is the envelope's format (from the writer schema). ``problem`` says why a non-null value did not
    decode; ``raw`` then holds the value bytes for the dead letter. ``seq_key_header`` is the seq-key header
    (TOMBSTONE_SEQ_KEY_HEADER) of a tombstone.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    body: str | None = None
    message_format: MessageFormat | None = None
    tombstone: bool = False
    problem: str | None = None
    raw: bytes | None = None
    seq_key_header: str | None = None
    decoded: dict[str, Any] | None = None

    @property
    def has_envelope(self) -> bool:
        """Whether the value decoded (as compact JSON on Spark or as a dict on the driver)."""
        return self.problem is None and (self.body is not None or self.decoded is not None)

    @property
    def location(self) -> MessageLocation:
        return MessageLocation(self.topic, self.partition, self.offset)

    def raw_message(self) -> dict[str, Any]:
        """What a dead letter keeps of a message that never decoded: where it was, its key and value bytes."""
        return {
            "_topic": self.topic,
            "_partition": self.partition,
            "_offset": self.offset,
            "key": _text_or_base64(self.key),
            "value_base64": base64.b64encode(self.raw).decode("ascii") if self.raw is not None else None,
        }


def undecodable(record: KafkaRecord) -> UndecodableMessageError:
    return UndecodableMessageError(record.problem or "value did not decode", location=record.location)


def envelope(record: KafkaRecord) -> dict[str, Any]:
    """The envelope dict of a decoded (non-tombstone) record, ready for
    :func:`~cdcbridge.apply.core.operations.decode_message`; raises :class:`UndecodableMessageError` if the body is
    not the compact JSON this job's Spark side writes."""
    if record.message_format is None or not record.has_envelope:
        raise undecodable(record)
    if record.decoded is not None:
        return {**_located(record), **record.decoded}
    assert record.body is not None
    try:
        compact = json.loads(record.body)
        message: dict[str, Any] = {
            **_located(record),
            "source": {"table": compact.get("t")},
            "timestamp": compact.get("ts"),
            "pk": [{"name": item.get("n"), "value": union_value(item.get("v"))} for item in compact.get("pk") or ()],
        }
        for short, name in _COMMON:
            if short in compact:
                message[name] = compact[short]
        if record.message_format is MessageFormat.MUTATE_LOG:
            message["type"] = compact.get("y")
            message["replace_row"] = compact.get("r", False)
            message["cells"] = [_cell(cell) for cell in compact.get("c") or ()]
        else:
            message["partial"] = compact.get("p", False)
            message["columns"] = {
                name: {"value": union_value(cell.get("v")), "version": cell.get("e")}
                for name, cell in (compact.get("m") or {}).items()
            }
    except (ValueError, TypeError, AttributeError) as error:
        raise UndecodableMessageError(
            f"decoded value is not the expected envelope JSON ({error})", location=record.location
        ) from None
    return message


def _located(record: KafkaRecord) -> dict[str, Any]:
    """The fields an envelope dict gets from where its message was: format, topic, partition, offset."""
    assert record.message_format is not None
    return {
        "_format": record.message_format.value,
        "_topic": record.topic,
        "_partition": record.partition,
        "_offset": record.offset,
    }


def tombstone(record: KafkaRecord, table: str, pk_names: tuple[str, ...]) -> dict[str, Any]:
    """The tombstone message of a null value: pk values from the Kafka key, names from the table."""
    if record.key is None:
        raise UndecodableMessageError("tombstone without a key", location=record.location)
    try:
        values = decode_key(record.key)
    except KeyDecodeError as error:
        raise UndecodableMessageError(f"tombstone key does not decode: {error}", location=record.location) from None
    if len(values) != len(pk_names):
        raise UndecodableMessageError(
            f"tombstone key holds {len(values)} primary-key values but table {table!r} has {len(pk_names)} "
            f"primary-key columns {list(pk_names)}",
            location=record.location,
        )
    return tombstone_message(
        table,
        list(zip(pk_names, values, strict=True)),
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        seq_key=record.seq_key_header,
    )


def union_value(tagged: Mapping[str, Any] | None) -> Any:
    """A flattened Avro union ``{"l": 5}`` → 5; bytes come base64-encoded, a double NaN/Infinity as a string."""
    if tagged is None:
        return None
    if len(tagged) != 1:
        raise ValueError(f"union value {dict(tagged)!r:.80} has not exactly one branch")
    ((branch, value),) = tagged.items()
    if branch == "b":
        return base64.b64decode(value)
    if branch == "d" and isinstance(value, str):
        return float(value)
    return value


def _cell(cell: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": cell.get("n"),
        "op": cell.get("o"),
        "value": union_value(cell.get("v")),
        "version": cell.get("e"),
        "amount": cell.get("a"),
    }


def _text_or_base64(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")
