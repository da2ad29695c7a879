"""All messages of one record for one table, across its formats, numbered for checkpointing.

The bridge checkpoints a record with a sub-sequence (the KCL rule), so the messages of a record are numbered
0..n-1 across formats in canonical format order (RECORD_IMAGE first, then MUTATE_LOG). The count depends only
on the record and the table format, never on the row read back, so a restart resumes at the same message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdcbridge.changes import ChangeRecord
from cdcbridge.contract import MessageFormat
from cdcbridge.formats.common import MessageItem
from cdcbridge.formats.mutate_log import build_mutate_log
from cdcbridge.formats.record_image import CurrentRow, build_record_image, needs_current_row
from cdcbridge.formats.table_format import BridgeTableFormat


@dataclass(frozen=True, slots=True)
class TableMessage:
    """One message ready for the producer: serialize `value` with the format's schema (None = tombstone)."""

    topic: str
    message_format: MessageFormat
    key: bytes
    value: dict[str, Any] | None
    sub_sequence: int


def needs_row_lookup(record: ChangeRecord, table_format: BridgeTableFormat) -> bool:
    """Whether the caller must read the row back (batched) before :func:`build_table_messages`."""
    return MessageFormat.RECORD_IMAGE in table_format.formats and needs_current_row(record)


def build_table_messages(
    record: ChangeRecord,
    table_format: BridgeTableFormat,
    *,
    instance: str,
    topic_prefix: str,
    current_row: CurrentRow | None = None,
    topics: Mapping[MessageFormat, str] | None = None,
) -> list[TableMessage]:
    """Messages of `record` for every format of its table; `current_row` as for build_record_image.

    `topics` (format → topic, as `table_format.topics` gives them) spares working the names out per record.
    """
    messages: list[TableMessage] = []
    for message_format in table_format.formats:
        if topics is not None:
            topic = topics[message_format]
        else:
            topic = table_format.topic(message_format, prefix=topic_prefix, table=record.table)
        for item in _format_items(record, table_format, message_format, instance, current_row):
            messages.append(TableMessage(topic, message_format, item.key, item.value, len(messages)))
    return messages


def _format_items(
    record: ChangeRecord,
    table_format: BridgeTableFormat,
    message_format: MessageFormat,
    instance: str,
    current_row: CurrentRow | None,
) -> list[MessageItem]:
    if message_format is MessageFormat.RECORD_IMAGE:
        return build_record_image(
            record, instance=instance, current_row=current_row, tombstones=table_format.tombstones
        )
    return build_mutate_log(record, instance=instance)
