"""Test helpers: the compact JSON the Spark side renders (checked against real Spark in the integration tests),
built here from the bridge's own envelope dicts, and the Kafka records that carry it."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from cdcbridge.apply.driver.kafka_records import KafkaRecord
from cdcbridge.contract import TOMBSTONE_SEQ_KEY_HEADER, MessageFormat
from cdcbridge.formats import schema_text
from cdcbridge.harness.bench.apply_workload import OutgoingMessage

_TAGS = {"boolean": "z", "long": "l", "double": "d", "string": "s", "bytes": "b"}


def _union(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    branch, raw = value
    if branch == "bytes":
        raw = base64.b64encode(raw).decode("ascii")
    return {_TAGS[branch]: raw}


def compact_json(value: dict[str, Any]) -> str:
    """Spark's rendering of a bridge envelope (nulls left out, as to_json does)."""
    compact: dict[str, Any] = {
        "t": value["source"]["table"],
        "s": value["seq"],
        "ts": value["timestamp"],
        "pk": [{"n": item["name"], "v": _union(item["value"])} for item in value["pk"]],
        "d": value["row_deleted"],
    }
    if "cells" in value:
        compact.update({"y": value["type"], "r": value["replace_row"]})
        compact["c"] = [
            {
                k: v
                for k, v in {
                    "n": c["name"],
                    "o": c["op"],
                    "v": _union(c["value"]),
                    "e": c["version"],
                    "a": c["amount"],
                }.items()
                if v is not None
            }
            for c in value["cells"]
        ]
    else:
        compact["p"] = value.get("partial", False)
        compact["m"] = {
            name: {k: v for k, v in {"v": _union(cell["value"]), "e": cell["version"]}.items() if v is not None}
            for name, cell in value["columns"].items()
        }
    return json.dumps(compact)


def kafka_records(
    messages: Sequence[OutgoingMessage], *, partition: int = 0, first_offset: int = 0
) -> list[KafkaRecord]:
    """KafkaRecords for messages as if they were read from one partition per topic, in order."""
    offsets: dict[str, int] = {}
    records = []
    for message in messages:
        offset = offsets.get(message.topic, first_offset)
        offsets[message.topic] = offset + 1
        header = dict(message.headers).get(TOMBSTONE_SEQ_KEY_HEADER)
        if message.value is None:
            records.append(
                KafkaRecord(
                    message.topic,
                    partition,
                    offset,
                    message.key,
                    tombstone=True,
                    seq_key_header=header.decode() if header else None,
                )
            )
            continue
        message_format = MessageFormat.MUTATE_LOG if "cells" in message.value else MessageFormat.RECORD_IMAGE
        records.append(
            KafkaRecord(
                message.topic,
                partition,
                offset,
                message.key,
                body=compact_json(message.value),
                message_format=message_format,
            )
        )
    return records


def batches(records: Sequence[KafkaRecord], cuts: Iterable[int]) -> list[list[KafkaRecord]]:
    """Split records at the given positions."""
    out, start = [], 0
    for cut in sorted(set(cuts)):
        out.append(list(records[start:cut]))
        start = cut
    out.append(list(records[start:]))
    return [batch for batch in out if batch]


def same(left: Any, right: Any) -> bool:
    """Equality where NaN equals NaN and a float never equals an int or a bool (types must match too)."""
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    if type(left) is not type(right):
        return False
    if isinstance(left, float) and math.isnan(left):
        return math.isnan(right)
    return left == right


def evolved_writer() -> dict[str, Any]:
    """MUTATE_LOG as another bridge version wrote it: no ``amount`` in cells and no ``op_index``, a field ours
    lacks, and a mutation type ours does not know."""
    writer = json.loads(schema_text(MessageFormat.MUTATE_LOG))
    seq = next(field for field in writer["fields"] if field["name"] == "seq")
    seq["type"]["fields"] = [field for field in seq["type"]["fields"] if field["name"] != "op_index"]
    cells = next(field for field in writer["fields"] if field["name"] == "cells")
    cells["type"]["items"]["fields"] = [f for f in cells["type"]["items"]["fields"] if f["name"] != "amount"]
    kind = next(field for field in writer["fields"] if field["name"] == "type")
    kind["type"]["symbols"] = [*kind["type"]["symbols"], "UPSERT"]
    writer["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    return writer
