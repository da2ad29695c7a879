"""The row every target stores per dead letter: where the message was, why it failed, what it held."""

from __future__ import annotations

import base64
import json
from typing import Any

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.policy import DeadLetter

#: Columns of a dead-letter table, in order (types are each target's own).
DEAD_LETTER_COLUMNS = ("app_id", "batch_id", "topic", "partition", "offset", "error_type", "error", "message")


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return {"$b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        return list(value)
    return str(value)


def message_json(message: Any) -> str | None:
    """The envelope (or the raw value of an undecodable message) as JSON text; bytes become {"$b64": …}."""
    if message is None:
        return None
    return json.dumps(message, default=_jsonable, sort_keys=True)


def dead_letter_row(dead_letter: DeadLetter, marker: BatchMarker) -> dict[str, Any]:
    record = dead_letter.to_record()
    return {
        "app_id": marker.app_id,
        "batch_id": marker.batch_id,
        "topic": record["topic"],
        "partition": record["partition"],
        "offset": record["offset"],
        "error_type": record["error_type"],
        "error": record["error"],
        "message": message_json(record["message"]),
    }
