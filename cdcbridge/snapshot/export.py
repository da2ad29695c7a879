"""The export of one key range: GetRange pages → full-row PUT records → the table's messages → Kafka.

Every row becomes a PUT record whose sequence sorts before every stream record from the snapshot's start on
(:func:`snapshot_sequence`), so RECORD_IMAGE gives the row's image and MUTATE_LOG a `replace_row` PUT, built by the
same builders as the bridge's messages and sent to the same topics with the same serializers. The range's progress
(the key to resume from, rows exported) is stored only for pages whose every message Kafka acknowledged; a crash
re-exports at most the unacknowledged pages, which the apply job absorbs as duplicates.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tablestore import OTSClientError, OTSServiceError
from urllib3.exceptions import HTTPError

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import REDACTED_COLUMNS_HEADER, CellOp, MessageFormat
from cdcbridge.formats.columns import ColumnPolicy
from cdcbridge.formats.keys import record_key
from cdcbridge.formats.table_format import BridgeTableFormat
from cdcbridge.kafka.sink import MessageSink
from cdcbridge.publish.record_encoder import EncodedMessage, FastEncoder, RecordEncodeError, RecordEncoder
from cdcbridge.snapshot.errors import SnapshotExportError
from cdcbridge.snapshot.key_bounds import KeyBound, describe_bound
from cdcbridge.snapshot.range_acks import RangeAcks
from cdcbridge.snapshot.state import RangeProgress, SnapshotStateStore

log = logging.getLogger(__name__)

#: `source.shard_id` of snapshot messages (they come from no shard).
SNAPSHOT_SHARD_ID = "snapshot"
#: Sequence epoch of snapshot messages. The service's epochs are undocumented; 0 is the only value certain to sort
#: at or before every stream record, which the replay of the stream onto the images relies on.
SNAPSHOT_EPOCH = 0


#: How long a range waits for its last acknowledgements: beyond the producer's message timeout (120 s by default, up
#: to 300 s when raised in kafka.producer), by which librdkafka has reported every message's fate.
DRAIN_TIMEOUT_SECONDS = 330.0


def snapshot_sequence(start_us: int) -> Sequence:
    """The sequence of every snapshot message: just before the stream start, below every record replayed after."""
    return Sequence(SNAPSHOT_EPOCH, start_us - 1, 0)


@dataclass(frozen=True)
class Publisher:
    """Where one table's messages go: the bridge's formats, topics, serializers and producer."""

    table: str
    instance: str
    table_format: BridgeTableFormat
    topic_prefix: str
    topics: Mapping[MessageFormat, str]
    serialize: Callable[[str, dict | None], bytes | None]
    sink: MessageSink
    #: The C encoders per format (as the bridge's); without them the builders and `serialize` do the work.
    fast_encoders: Mapping[MessageFormat, FastEncoder] = field(default_factory=dict)
    #: The table's column selection and masking, applied to every row before it is encoded (as the bridge does).
    columns: ColumnPolicy | None = None

    def headers(self) -> list[tuple[str, bytes]] | None:
        """Headers of every message of the table: the redacted columns' names, if any."""
        header = self.columns.redacted_header if self.columns is not None else None
        return [(REDACTED_COLUMNS_HEADER, header)] if header is not None else None

    def encoder(self) -> RecordEncoder:
        return RecordEncoder(
            table=self.table, instance=self.instance, table_format=self.table_format, topic_prefix=self.topic_prefix,
            topics=self.topics, serialize=self.serialize, fast_encoders=self.fast_encoders,
        )  # fmt: skip


class RowCounter:
    """Rows exported by all ranges of one table (thread-safe), for the progress display."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows = 0

    def add(self, rows: int) -> None:
        with self._lock:
            self.rows += rows


class RangeExporter:
    """Exports ranges of one table; one instance is shared by the export threads (it keeps no per-range state)."""

    def __init__(
        self,
        *,
        ots: Any,
        publisher: Publisher,
        store: SnapshotStateStore,
        stream_id: str,
        start_us: int,
        page_rows: int,
        counter: RowCounter,
        halt: threading.Event,
        max_pending_pages: int = 4,
        drain_timeout_seconds: float = DRAIN_TIMEOUT_SECONDS,
    ) -> None:
        self._ots = ots
        self._publisher = publisher
        self._encoder = publisher.encoder()
        self._store = store
        self._stream_id = stream_id
        self._sequence = snapshot_sequence(start_us)
        self._page_rows = page_rows
        self._counter = counter
        self._halt = halt
        self._max_pending = max_pending_pages
        self._drain_timeout = drain_timeout_seconds

    def export(self, progress: RangeProgress) -> RangeProgress:
        """Export `progress`'s range from where it stopped; returns the stored progress (done unless halted)."""
        acks = RangeAcks(progress.rows)
        start = progress.resume
        while start is not None and self._room_for_a_page(acks):
            self._raise_if_failed(acks, progress)
            rows, next_key = self._read_page(progress, start)
            self._produce_page(acks, rows, next_key, progress)
            self._counter.add(len(rows))
            progress = self._save_confirmed(acks, progress)
            start = next_key
        acks.wait(max_pending=0, timeout=self._drain_timeout)
        self._raise_if_failed(acks, progress)
        progress = self._save_confirmed(acks, progress)
        if not progress.done and not self._halt.is_set():
            raise SnapshotExportError(
                f"table {self._publisher.table} range {progress.index}: Kafka did not acknowledge the last pages "
                f"within {self._drain_timeout:.0f} s; run the snapshot again to resume"
            )
        return progress

    # ----- internals ------------------------------------------------------------------------------------------

    def _room_for_a_page(self, acks: RangeAcks) -> bool:
        """Wait until few enough pages are unacknowledged (memory stays bounded); False once halted."""
        while not self._halt.is_set():
            if acks.wait(max_pending=self._max_pending, timeout=1.0):
                return not self._halt.is_set()
        return False

    def _read_page(self, progress: RangeProgress, start: KeyBound) -> tuple[list[Any], KeyBound | None]:
        table = self._publisher.table
        try:
            _, next_key, rows, _ = self._ots.get_range(
                table, "FORWARD", start, progress.end, max_version=1, limit=self._page_rows
            )
        except (OTSServiceError, OTSClientError, OSError, HTTPError) as error:
            raise SnapshotExportError(
                f"table {table} range {progress.index}: GetRange from {describe_bound(start)} failed: {error}; run "
                "the snapshot again to resume"
            ) from None
        return rows, next_key or None

    def _produce_page(
        self, acks: RangeAcks, rows: list[Any], next_key: KeyBound | None, progress: RangeProgress
    ) -> None:
        publisher = self._publisher
        messages = encode_snapshot_rows(self._encoder, publisher, rows, self._sequence, f"range {progress.index}")
        page = acks.add_page(next_key, len(rows), len(messages))
        on_ack = partial(acks.ack, page)
        produce, headers = publisher.sink.produce, publisher.headers()
        for key, (topic, _, value) in messages:
            produce(topic, key, value, on_ack, headers)

    def _save_confirmed(self, acks: RangeAcks, progress: RangeProgress) -> RangeProgress:
        confirmed = acks.confirmed()
        if confirmed is None:
            return progress
        resume, rows = confirmed
        if (resume, rows) == (progress.resume, progress.rows):
            return progress
        progress = progress.advanced(resume, rows)
        self._store.save_progress(self._stream_id, progress)
        return progress

    def _raise_if_failed(self, acks: RangeAcks, progress: RangeProgress) -> None:
        if acks.failure is not None:
            self._save_confirmed(acks, progress)
            raise SnapshotExportError(
                f"table {self._publisher.table} range {progress.index}: {acks.failure}; run the snapshot again to "
                "resume"
            ) from acks.failure


def encode_snapshot_rows(
    encoder: RecordEncoder, publisher: Publisher, rows: list[Any], sequence: Sequence, where: str
) -> list[tuple[bytes, EncodedMessage]]:
    """Each row's messages with its Kafka key; a row the encoder refuses raises, naming `where` it was read."""
    messages: list[tuple[bytes, EncodedMessage]] = []
    for row in rows:
        record = snapshot_record(publisher, row, sequence)
        try:
            encoded = encoder.encode(record)
        except RecordEncodeError as error:
            raise SnapshotExportError(f"{error} ({where})") from error
        key = record_key(record)
        messages += [(key, message) for message in encoded]
    return messages


def snapshot_record(publisher: Publisher, row: Any, sequence: Sequence) -> ChangeRecord:
    """A row read with GetRange / GetRow as a full-row PUT record of the table, column policy applied."""
    primary_key = [(name, _plain(value)) for name, value in row.primary_key]
    cells = [Cell(name, CellOp.PUT, _plain(value), timestamp) for name, value, timestamp in row.attribute_columns]
    record = ChangeRecord(publisher.table, RecordAction.PUT, primary_key, cells, sequence, SNAPSHOT_SHARD_ID)
    columns = publisher.columns
    return record if columns is None else columns.apply(record)


def _plain(value: Any) -> Any:
    """The SDK reads BINARY as bytearray; the message builders take bytes."""
    return bytes(value) if isinstance(value, bytearray) else value
