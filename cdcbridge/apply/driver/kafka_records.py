"""What the driver receives per Kafka message, and how it becomes the envelope dict the pure core decodes.

Spark does the heavy part (framing check, ``from_avro`` into our reader schema, union flattening) and hands the
driver one :class:`KafkaRecord` per message with the envelope as compact JSON (short field names, each Avro union
as a one-key object: ``{"l": 5}``, ``{"b": "<base64>"}``), because Python parses JSON far faster than it builds
nested Spark ``Row`` objects. This module turns that JSON back into the DESIGN §6 field names, with the message's
topic/partition/offset attached so every error and dead letter names it. Nothing here imports Spark.
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

    ``body`` is the compact JSON of the decoded envelope (None for a tombstone or an undecodable value) and
    ``message_format`` the envelope's format (from the writer schema). ``problem`` says why a non-null value did
    not decode; ``raw`` then holds the value bytes for the dead letter. ``seq_key_header`` is the
    seq-key header (TOMBSTONE_SEQ_KEY_HEADER) of a tombstone.
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
    if record.body is None or record.message_format is None:
        raise undecodable(record)
    try:
        compact = json.loads(record.body)
        message: dict[str, Any] = {
            "_format": record.message_format.value,
            "_topic": record.topic,
            "_partition": record.partition,
            "_offset": record.offset,
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
