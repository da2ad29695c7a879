"""One table's change records as framed Kafka message values, by the fastest path that covers each record.

The C encoders (cdcbridge.formats, optional) write a plain record's values directly; any other record goes through
the message builders and the registry-bound serializer, which also word the errors of bad records. The bridge
processor and the snapshot export both encode through here, so a record gives the same topics, bytes and
sub-sequences whichever path made them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cdcbridge.changes import ChangeRecord
from cdcbridge.contract import MessageFormat
from cdcbridge.formats import fast_envelopes
from cdcbridge.formats.record_image import CurrentRow
from cdcbridge.formats.table_format import BridgeTableFormat
from cdcbridge.formats.table_messages import build_table_messages

#: Encodes one record of one format to its framed message values (None in the list: a tombstone), or declines (None).
FastEncoder = Callable[[ChangeRecord, CurrentRow | None], list[bytes | None] | None]
#: Serializes one message value of a topic (None stays None: a tombstone).
Serializer = Callable[[str, dict | None], bytes | None]
#: One message of a record: (topic, format, framed value or None for a tombstone).
EncodedMessage = tuple[str, MessageFormat, bytes | None]


class RecordEncodeError(Exception):
    """A message of a record cannot be serialized: its value does not fit the topic's schema."""


class RecordEncoder:
    """Encodes the records of one table for all of its formats, in sub-sequence order (formats in table order)."""

    def __init__(
        self,
        *,
        table: str,
        instance: str,
        table_format: BridgeTableFormat,
        topic_prefix: str,
        topics: Mapping[MessageFormat, str],
        serialize: Serializer,
        fast_encoders: Mapping[MessageFormat, FastEncoder] | None = None,
    ) -> None:
        self._table = table
        self._instance = instance
        self._table_format = table_format
        self._topic_prefix = topic_prefix
        self._topics = dict(topics)
        self._serialize = serialize
        encoders = fast_encoders or {}
        #: (topic, format, encoder) per format when every format has a fast encoder, else empty.
        self._fast_plan: list[tuple[str, MessageFormat, FastEncoder]] = (
            [(self._topics[f], f, encoders[f]) for f in table_format.formats]
            if all(f in encoders for f in table_format.formats)
            else []
        )
        #: The C page encoder's plan when every format is a C encoder bound to its schema id, else None.
        self._page_plan = (
            fast_envelopes.page_plan([(encode, topic) for topic, _, encode in self._fast_plan])  # type: ignore[misc]
            if self._fast_plan and all(isinstance(e, fast_envelopes.FastFormat) for _, _, e in self._fast_plan)
            else None
        )

    def encode_into(
        self,
        records: list[ChangeRecord],
        start: int,
        stop: int,
        rows: dict[int, CurrentRow | None] | None,
        shard_id: str,
        start_us: int,
        page_lists: fast_envelopes.PageLists,
    ) -> int:
        """Lay out records[start:stop] in `page_lists` in C, up to the first record it leaves to the caller (returned
        index; `start` when there is no C page encoder): see fast_envelopes.encode_into."""
        if self._page_plan is None:
            return start
        return fast_envelopes.encode_into(records, start, stop, self._page_plan, rows, shard_id, start_us, page_lists)

    def encode(self, record: ChangeRecord, current_row: CurrentRow | None = None) -> list[EncodedMessage]:
        """Every message of `record`; `current_row` is its row read back (RECORD_IMAGE of an UPDATE), if any."""
        if self._fast_plan:
            messages = self._encode_fast(record, current_row)
            if messages is not None:
                return messages
        return self._encode_by_builders(record, current_row)

    def _encode_fast(self, record: ChangeRecord, current_row: CurrentRow | None) -> list[EncodedMessage] | None:
        messages: list[EncodedMessage] = []
        for topic, message_format, encode in self._fast_plan:
            values = encode(record, current_row)
            if values is None:
                return None  # one declining format sends the whole record the other way, so sub-sequences agree
            messages += [(topic, message_format, value) for value in values]
        return messages

    def _encode_by_builders(self, record: ChangeRecord, current_row: CurrentRow | None) -> list[EncodedMessage]:
        built = build_table_messages(
            record,
            self._table_format,
            instance=self._instance,
            topic_prefix=self._topic_prefix,
            current_row=current_row,
            topics=self._topics,
        )
        messages: list[EncodedMessage] = []
        for message in built:
            try:
                value = self._serialize(message.topic, message.value)
            except Exception as error:
                raise RecordEncodeError(
                    f"cannot serialize the {message.message_format} message of table {self._table} key "
                    f"{message.key.decode('utf-8', 'replace')} for topic {message.topic}: {error}"
                ) from error
            messages.append((message.topic, message.message_format, value))
        return messages
