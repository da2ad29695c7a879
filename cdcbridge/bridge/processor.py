"""The bridge processor: turns one shard's change records into Kafka messages and checkpoints on acknowledgement.

For each fetched page it reads back the rows RECORD_IMAGE needs (one batched lookup), encodes every message of every
record (numbered by sub-sequence; cdcbridge.publish.record_encoder: the C encoders or the builders and the
registry-bound serializers) and produces them keyed by primary key. A small pump thread moves the shard's
checkpoint to the end of the acknowledged prefix; a delivery failure freezes the checkpoint at the gap and makes the
next call raise, so coordination restarts the shard from its stored checkpoint (at-least-once, never a skipped
message).

Two bounds in time (cdcbridge.snapshot): records committed before the table's snapshot start are covered by the
snapshot, so they are checkpointed as handled without a message; records committed after `bridge.end_time` are
neither produced nor checkpointed, so a later run without an end time continues exactly there.

While an incremental snapshot of the table has a chunk open (cdcbridge.snapshot.incremental_state), the shard's
records go through a backlog: cdcbridge.bridge.chunk_watch marks the chunk's dirty keys, says when the shard passed
the chunk's fence (the report is sent once everything before that is acknowledged) and holds a record of a key in the
chunk committed after the fence, with every record after it, until the chunk is emitted.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from cdcbridge.bridge.acks import AckPage, AckTracker, ConfirmedPosition
from cdcbridge.bridge.chunk_watch import ShardChunkWatch
from cdcbridge.bridge.row_lookup import CurrentRow
from cdcbridge.changes import ChangeRecord, Sequence, Value
from cdcbridge.contract import (
    DEAD_LETTER_REASON_HEADER,
    REDACTED_COLUMNS_HEADER,
    TOMBSTONE_SEQ_KEY_HEADER,
    MessageFormat,
)
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.errors import CheckpointError, LeaseLostError, LeaseStoreUnavailableError
from cdcbridge.coordination.processor import (
    InitializationInput,
    ProcessRecordsInput,
    RecordProcessor,
    RecordProcessorCheckpointer,
    ShutdownInput,
    ShutdownReason,
)
from cdcbridge.formats.columns import ColumnPolicy
from cdcbridge.formats.fast_envelopes import PageLists
from cdcbridge.formats.keys import record_key
from cdcbridge.formats.table_format import BridgeTableFormat
from cdcbridge.formats.table_messages import needs_row_lookup
from cdcbridge.kafka.errors import KafkaSideError, MessageTooLargeError
from cdcbridge.kafka.sink import Delivery, MessageSink
from cdcbridge.publish.record_encoder import FastEncoder, RecordEncodeError, RecordEncoder
from cdcbridge.snapshot.errors import SnapshotStateError
from cdcbridge.snapshot.fences import SnapshotFences

log = logging.getLogger(__name__)

#: Past this many held records a shard waits (up to the fence refresh) for the hold to end before it reads on.
MAX_HELD_RECORDS = 20_000

#: Reads current rows of a table for update lookup: (table, primary keys) → rows in the same order.
RowReader = Callable[[str, list[list[tuple[str, Value]]]], list[CurrentRow | None]]


class BridgeProcessingError(Exception):
    """A shard cannot go on until the cause is fixed; the shard restarts from its checkpoint."""


@dataclass(frozen=True)
class BridgeContext:
    """Everything a shard's processor needs, shared by all shards of a table in one worker."""

    table_format: BridgeTableFormat
    table: str
    instance: str
    topic_prefix: str
    serialize: Callable[[str, dict | None], bytes | None]
    sink: MessageSink
    read_rows: RowReader | None
    checkpoint_interval_seconds: float = 1.0
    on_produced: Callable[[int], None] | None = None
    #: Called when a shard's processor starts: the table's stream start in µs (records committed before it are
    #: skipped), or None; raises while the table's snapshot runs, so the shard produces nothing until it is done.
    stream_start: Callable[[], int | None] | None = None
    #: Records committed after this (µs) are neither produced nor checkpointed (`bridge.end_time`).
    end_time_us: int | None = None
    #: Told how many records of a batch were skipped because the snapshot covers them.
    on_skipped: Callable[[int], None] | None = None
    #: Where a reference to a message Kafka refuses as too large goes (`kafka.dead_letter_topic`); None = the shard
    #: stops at that message until the topic's limit is raised.
    dead_letter_topic: str | None = None
    #: Only messages larger than this are dead-lettered: the broker refuses a whole batch for one oversize message,
    #: and the small messages of that batch must be sent again (the shard restarts), never replaced by references.
    dead_letter_over_bytes: int = 0
    #: Per format, a function that encodes a record (with its read-back row, if any) straight to the framed values
    #: of that format's messages, None being a tombstone (the C fast path of cdcbridge.formats), or returns None to
    #: leave the record to the builders and serializers, which also word the errors of bad records. Used only when
    #: every format of the table has one.
    fast_encoders: Mapping[MessageFormat, FastEncoder] = field(default_factory=dict)
    #: The table's column selection and masking (`source.tables[].columns`), applied to every record and read-back
    #: row before either encoder sees it; None: every column as it is (and no cost).
    columns: ColumnPolicy | None = None
    #: The table's incremental snapshots as this worker sees them; None: the table's records are never held.
    fences: SnapshotFences | None = None
    #: `snapshot.incremental.clock_skew_margin_seconds` in µs: an empty read passes a fence this long after it.
    fence_margin_us: int = 1_000_000


class BridgeProcessor(RecordProcessor):
    def __init__(self, context: BridgeContext) -> None:
        self._context = context
        self._topics = context.table_format.topics(prefix=context.topic_prefix, table=context.table)
        self._encoder = RecordEncoder(
            table=context.table,
            instance=context.instance,
            table_format=context.table_format,
            topic_prefix=context.topic_prefix,
            topics=self._topics,
            serialize=context.serialize,
            fast_encoders=context.fast_encoders,
        )
        self._formats_by_topic = {topic: message_format for message_format, topic in self._topics.items()}
        self._tracker = AckTracker(on_page_done=self._count_acked)
        self._failure: Exception | None = None
        self._failure_logged: Exception | None = None
        self._checkpointer: RecordProcessorCheckpointer | None = None
        self._last_written: ConfirmedPosition | None = None
        self._stop_pump = threading.Event()
        self._pump: threading.Thread | None = None
        self._checkpoint_lock = threading.Lock()
        self._shard_id = ""
        self._start_us: int | None = None
        self._skipped = 0
        self._past_end_time = False
        #: Refused oversize messages waiting for the pump to send their dead-letter references.
        self._dead_letters: deque[tuple[AckPage, int, MessageTooLargeError]] = deque()
        #: The shard's part in the table's incremental snapshots (None without `context.fences`).
        self._watch: ShardChunkWatch | None = None
        #: Records handed to this processor and not produced yet (held behind a chunk's fence), in shard order.
        self._backlog: list[ChangeRecord] = []
        self._resume_point: ExtendedSequence | None = None
        self._report_lock = threading.Lock()

    # ----------------------------------------------------------------------------------- RecordProcessor
    def initialize(self, initialization: InitializationInput) -> None:
        self._shard_id = initialization.shard_id
        if self._context.stream_start is not None:
            self._start_us = self._context.stream_start()
        if self._context.fences is not None:
            self._watch = ShardChunkWatch(self._context.table, self._shard_id, self._context.fence_margin_us)
        self._pump = threading.Thread(target=self._pump_checkpoints, name=f"ckpt-{self._shard_id}", daemon=True)
        self._pump.start()

    def process_records(self, records: ProcessRecordsInput) -> None:
        self._raise_if_failed()
        self._checkpointer = records.checkpointer
        if self._past_end_time and not self._backlog:
            self._pass_everything_after_end_time()
            return  # later records are later still: nothing more is produced or checkpointed for this shard
        batch = [] if self._past_end_time else self._within_end_time(records.records)
        if self._watch is None:
            self._produce(batch, records)
            return
        if records.resume_point is not None:
            self._resume_point = records.resume_point
        self._backlog.extend(batch)
        self._release_held()
        self._wait_while_backlog_full()
        self._pass_everything_after_end_time()
        self._send_reports()

    def on_idle(self) -> None:
        """Caught up: every fence older than now - m is passed (only with nothing held: a held record may be
        followed by records up to a later fence), held records are retried, due reports sent."""
        self._raise_if_failed()
        fences, watch = self._context.fences, self._watch
        if fences is None or watch is None:
            return
        if self._backlog:
            self._release_held()
        if not self._backlog:
            watch.idle(fences.view(), int(fences.clock.wall() * 1_000_000))
        self._pass_everything_after_end_time()
        self._send_reports()

    def _pass_everything_after_end_time(self) -> None:
        """Past `bridge.end_time` with nothing held, this shard produces nothing more in this run: every open chunk
        is passed (the records it leaves are produced by a later run, after any snapshot image)."""
        fences, watch = self._context.fences, self._watch
        if fences is None or watch is None or not self._past_end_time or self._backlog:
            return
        watch.admit([], fences.view())  # follow the open chunks
        watch.shard_ended()
        self._send_reports()

    @property
    def holding(self) -> str | None:
        """What the shard waits for while it holds records back (for status and tests)."""
        return self._watch.holding if self._watch is not None and self._backlog else None

    def _release_held(self) -> None:
        """Produce the head of the backlog that no open chunk holds back."""
        fences, watch, checkpointer = self._context.fences, self._watch, self._checkpointer
        if fences is None or watch is None or checkpointer is None:
            return
        count = watch.admit(self._backlog, fences.view())
        if count:
            released, self._backlog = self._backlog[:count], self._backlog[count:]
            self._produce(released, ProcessRecordsInput(released, checkpointer, self._resume_point))

    def _wait_while_backlog_full(self) -> None:
        """Bound the memory a long hold takes: past MAX_HELD_RECORDS, wait up to one fence refresh for the hold to
        end before the next read."""
        if len(self._backlog) <= MAX_HELD_RECORDS:
            return
        deadline = time.monotonic() + 1.0
        while self._backlog and len(self._backlog) > MAX_HELD_RECORDS and time.monotonic() < deadline:
            time.sleep(0.05)
            self._release_held()
            self._send_reports()

    def _send_reports(self) -> None:
        """Store the reports on chunks this shard passed with everything before acknowledged (any thread)."""
        fences, watch = self._context.fences, self._watch
        if fences is None or watch is None or not watch.unreported():
            return  # nothing passed and unreported: no need to work out the acknowledged prefix
        with self._report_lock:
            for report in watch.reports_due(self._tracker.confirmed(), int(fences.clock.wall() * 1000)):
                try:
                    fences.report(report)
                except SnapshotStateError as error:
                    log.warning("shard %s of table %s: report on chunk %d of incremental snapshot %s not stored "
                                "yet, retrying: %s", self._shard_id, self._context.table, report.chunk,
                                report.snapshot_id, error)  # fmt: skip
                    return
                watch.reported(report)

    def _produce(self, batch: list[ChangeRecord], records: ProcessRecordsInput) -> None:
        """Encode and produce `batch` (the next records of the shard) as one acknowledgement page."""
        columns = self._context.columns
        if columns is not None:
            batch = columns.apply_all(batch)
        start_us = self._start_us
        produced_records = batch if start_us is None else [r for r in batch if r.sequence.timestamp_us >= start_us]
        rows = self._lookup_rows(produced_records)  # the skipped records need no row read back
        # Per message, the work below is most of the bridge's time. The page's messages are laid out in flat lists
        # first (so that its acknowledgement flags exist before the first ack), by the C page encoder for the plain
        # records and by _lay_out_record for the others (a record before the snapshot start, a resumed record, a
        # key or value the C path leaves to the builders).
        lists = PageLists.empty()
        resume_index = self._resume_index(batch, records)
        encode_into, shard_id = self._encoder.encode_into, self._shard_id
        c_rows, c_start_us = rows or None, -1 if start_us is None else start_us
        index, count, skipped = 0, len(batch), 0
        while index < count:
            stop = resume_index if index <= resume_index else count
            index = encode_into(batch, index, stop, c_rows, shard_id, c_start_us, lists)
            if index < count:
                skipped += self._lay_out_record(batch[index], records, rows, lists)
                index += 1
        page = AckPage(
            lists.sequences, lists.first_subs, lists.ends, lists.topics, lists.keys,
            on_failure=self._on_delivery_failure, describe=self._context.sink.delivery_error,
        )  # fmt: skip
        self._tracker.add(page)
        self._produce_page(page, lists.values)
        if self._context.on_produced is not None:
            self._context.on_produced(len(lists.topics))
        if skipped:
            self._count_skipped(skipped)

    def _produce_page(self, page: AckPage, values: list[bytes | None]) -> None:
        sink = self._context.sink
        produce, on_delivery, topics, keys = sink.produce_tracked, page.on_delivery, page.topics, page.keys
        columns = self._context.columns
        table_headers = (
            [(REDACTED_COLUMNS_HEADER, columns.redacted_header)]
            if columns is not None and columns.redacted_header is not None
            else None
        )
        for index, value in enumerate(values):
            headers = table_headers
            if value is None:  # the tombstone after a row-deleted image: same seq as that image
                tombstone_seq = (TOMBSTONE_SEQ_KEY_HEADER, page.sequences[page.locate(index)[0]].key(0).encode())
                headers = [tombstone_seq, *(table_headers or ())]
            try:
                produce(topics[index], keys[index], value, partial(on_delivery, index), headers)
            except MessageTooLargeError as error:  # refused before it was queued
                page.fail(index, error)
        sink.count_produced(Counter(topics))

    @staticmethod
    def _resume_index(batch: list[ChangeRecord], records: ProcessRecordsInput) -> int:
        """Position in `batch` of the record a sub-sequence checkpoint points into (-1: none)."""
        point = records.resume_point
        if point is None or point.sub_sequence is None:
            return -1
        return next((i for i, record in enumerate(batch) if record.sequence == point.sequence), -1)

    def _lay_out_record(
        self,
        record: ChangeRecord,
        records: ProcessRecordsInput,
        rows: dict[int, CurrentRow | None],
        lists: PageLists,
    ) -> int:
        """Append one record's messages to the page lists by the general path; 1 if it was skipped (the snapshot
        covers it), else 0."""
        sequences, first_subs, ends, topics, keys, values = lists
        sequence = record.sequence
        if self._start_us is not None and sequence.timestamp_us < self._start_us:
            sequences.append(sequence)  # covered by the snapshot: handled, nothing to send
            first_subs.append(0)
            ends.append(len(topics))
            return 1
        if not record.shard_id:
            record.shard_id = self._shard_id  # iterators are opaque: we know the shard here
        try:
            messages = self._encoder.encode(record, rows.get(id(record)))
        except RecordEncodeError as error:
            raise BridgeProcessingError(f"{error} (shard {self._shard_id})") from error
        key = record_key(record)
        first_sub = records.start_sub_sequence(record)
        sequences.append(sequence)
        first_subs.append(first_sub)
        for topic, _, value in messages[first_sub:]:
            topics.append(topic)
            keys.append(key)
            values.append(value)
        ends.append(len(topics))
        return 0

    def shutdown(self, shutdown: ShutdownInput) -> None:
        self._checkpointer = shutdown.checkpointer
        try:
            if shutdown.reason is ShutdownReason.LEASE_LOST:
                return  # a checkpoint would be refused; in-flight acks no longer matter to this owner
            if shutdown.reason is ShutdownReason.SHARD_END:
                timeout = shutdown.timeout_seconds
                deadline = None if timeout is None else time.monotonic() + timeout
                self._drain_backlog(deadline)
                # Children may start only after every message of this shard is acknowledged.
                while not self._tracker.wait_all_acked(1.0):
                    self._raise_if_failed()
                self._raise_if_failed()
                self._report_shard_end(deadline)
                # Past the end time, records after it were handed out but not produced: no SHARD_END over them, and
                # the shard stays unfinished (its lease held, nothing re-read) until the worker stops.
                self._write_checkpoint(final=not self._past_end_time)
                if self._past_end_time:
                    shutdown.checkpointer.hold_open("it closed after the end time; later records are not produced")
                return
            if shutdown.reason in (ShutdownReason.STOLEN, ShutdownReason.REQUESTED):
                self._tracker.wait_all_acked(shutdown.timeout_seconds)
                self._write_checkpoint(final=False)
        finally:
            self._stop_pump.set()
            self._count_last_acks()
            if self._skipped:
                log.info("shard %s of table %s: %d record(s) before the snapshot start skipped in this run",
                         self._shard_id, self._context.table, self._skipped)  # fmt: skip

    # ----------------------------------------------------------------------------------- internals
    def _drain_backlog(self, deadline: float | None) -> None:
        """At the shard's end: wait for the hold to end and produce what it held (a hold ends when its chunk is
        emitted or abandoned, or its exporter is dead)."""
        while self._backlog:
            self._raise_if_failed()
            self._release_held()
            self._send_reports()
            if self._backlog:
                self._give_up_at(deadline, "its held records were released")
                time.sleep(0.05)

    def _report_shard_end(self, deadline: float | None) -> None:
        """Report on every open chunk before the end is checkpointed: once finished, the shard is not waited for."""
        fences, watch = self._context.fences, self._watch
        if fences is None or watch is None:
            return
        watch.shard_ended()
        while True:
            watch.admit([], fences.view())  # forget chunks closed meanwhile
            self._send_reports()
            if not watch.unreported():
                return
            self._give_up_at(deadline, "its reports on open snapshot chunks were stored")
            time.sleep(0.1)

    def _give_up_at(self, deadline: float | None, what: str) -> None:
        """Past the shutdown's time: fail, so the end is not checkpointed and the shard is read again."""
        if deadline is not None and time.monotonic() >= deadline:
            raise BridgeProcessingError(
                f"shard {self._shard_id} of table {self._context.table} ended, but not all {what} in time; it "
                "restarts from its checkpoint"
            )

    def _within_end_time(self, records: list[ChangeRecord]) -> list[ChangeRecord]:
        """The records up to the end time; from the first one after it on, this shard produces nothing more."""
        end_us = self._context.end_time_us
        if end_us is None or not records or records[-1].sequence.timestamp_us <= end_us:
            return records
        for index, record in enumerate(records):
            if record.sequence.timestamp_us > end_us:
                self._past_end_time = True
                log.info("shard %s of table %s passed the end time; it produces nothing after %s",
                         self._shard_id, self._context.table, record.sequence.to_text())  # fmt: skip
                return records[:index]
        return records

    def _count_skipped(self, skipped: int) -> None:
        if not self._skipped:
            start = datetime.fromtimestamp((self._start_us or 0) / 1e6, UTC).isoformat(timespec="milliseconds")
            log.info("shard %s of table %s: skipping records committed before the snapshot start %s; the snapshot "
                     "covers them", self._shard_id, self._context.table, start)  # fmt: skip
        self._skipped += skipped
        if self._context.on_skipped is not None:
            self._context.on_skipped(skipped)

    def _lookup_rows(self, records: list[ChangeRecord]) -> dict[int, CurrentRow | None]:
        context = self._context
        wanted = [r for r in records if needs_row_lookup(r, context.table_format)]
        if not wanted or context.read_rows is None:
            return {}
        rows = context.read_rows(context.table, [list(r.primary_key) for r in wanted])
        if context.columns is not None:
            rows = [context.columns.apply_row(row) for row in rows]
        return {id(record): row for record, row in zip(wanted, rows, strict=True)}

    def _on_delivery_failure(self, page: AckPage, index: int, error: KafkaSideError) -> None:
        """A message of `page` was not delivered: an oversize one goes to the dead-letter topic when configured (the
        pump sends it), anything else stops the shard (delivery thread, or the processing thread for a message
        refused before it was queued)."""
        if (
            isinstance(error, MessageTooLargeError)
            and self._context.dead_letter_topic is not None
            and error.size > self._context.dead_letter_over_bytes
        ):
            self._dead_letters.append((page, index, error))
        else:
            self._record_failure(error)

    def _count_acked(self, page: AckPage) -> None:
        """Count the acknowledged messages of `page`, once per page (off the per-message path): when the prefix
        passes it, or when the shard stops before that."""
        counts = Counter(topic for topic, acked in zip(page.topics, page.acked, strict=True) if acked)
        self._context.sink.count_acked(counts, page.latencies)

    def _count_last_acks(self) -> None:
        for page in self._tracker.drain():
            self._count_acked(page)

    def _send_dead_letters(self) -> None:
        """Replace each refused oversize message by a small reference on the dead-letter topic; the message counts as
        delivered once that reference is acknowledged, so the checkpoint moves on without a silent skip."""
        topic = self._context.dead_letter_topic
        while topic is not None and self._dead_letters:
            page, index, error = self._dead_letters.popleft()
            record, sub_sequence = page.locate(index)
            refused_topic = page.topics[index]
            key = page.keys[index]
            reference = {
                "reason": "message_too_large",
                "table": self._context.table,
                "shard_id": self._shard_id,
                "topic": refused_topic,
                "format": str(self._formats_by_topic.get(refused_topic, "")),
                "key": key.decode("utf-8", "replace"),
                "seq_key": page.sequences[record].key(0),
                "sub_sequence": sub_sequence,
                "size": error.size,
                "error": str(error),
            }
            log.error(
                "shard %s of table %s: message for key %s on topic %s is %d bytes, too large for Kafka; a reference "
                "went to the dead-letter topic %s (re-read the row from the source to recover it)",
                self._shard_id, self._context.table, reference["key"], refused_topic, error.size, topic,
            )  # fmt: skip

            def on_reference_ack(delivery: Delivery, page: AckPage = page, index: int = index) -> None:
                if delivery.error is None:
                    page.mark_acked(index)
                else:
                    self._record_failure(delivery.error)

            self._context.sink.produce(
                topic,
                key,
                json.dumps(reference, sort_keys=True).encode(),
                on_reference_ack,
                [(DEAD_LETTER_REASON_HEADER, b"message_too_large")],
            )

    def _record_failure(self, error: Exception) -> None:
        """Keep the failure that explains the stop (delivery thread only).

        The first failure wins, except that a larger refused message replaces a smaller one: the broker refuses a
        whole batch when one message in it is too large, so the largest refused message is the one to name.
        """
        current = self._failure
        larger = (
            isinstance(error, MessageTooLargeError)
            and isinstance(current, MessageTooLargeError)
            and error.size > current.size
        )
        if current is None or larger:
            self._failure = error

    def _log_failure(self) -> None:
        """Say once per failure that the shard stops, even if no further record arrives to raise it."""
        failure = self._failure
        if failure is not None and failure is not self._failure_logged:
            self._failure_logged = failure
            log.error("shard %s of table %s stops: %s", self._shard_id, self._context.table, failure)

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            self._log_failure()
            failure = self._failure
            if isinstance(failure, KafkaSideError):
                raise BridgeProcessingError(
                    f"shard {self._shard_id} of table {self._context.table} restarts from its checkpoint: {failure}"
                ) from failure
            raise failure

    def _pump_checkpoints(self) -> None:
        while not self._stop_pump.wait(self._context.checkpoint_interval_seconds):
            self._send_dead_letters()
            self._log_failure()
            try:
                self._write_checkpoint(final=False)
            except (LeaseLostError, CheckpointError):
                return  # this incarnation is over; coordination tells the processor through shutdown
            except LeaseStoreUnavailableError as error:
                log.warning("checkpoint of shard %s deferred, status table unreachable: %s", self._shard_id, error)
            self._send_reports()

    def _write_checkpoint(self, *, final: bool) -> None:
        """Checkpoint the acknowledged prefix; `final` (shard end) checkpoints everything handed out."""
        checkpointer = self._checkpointer
        if checkpointer is None:
            return
        with self._checkpoint_lock:
            if final:
                checkpointer.checkpoint()
                return
            position = self._tracker.confirmed()
            if position is not None and self._watch is not None:
                capped, cap = self._watch.checkpoint_cap()
                if capped:
                    if cap is None:
                        return
                    if position.sequence > cap:
                        position = ConfirmedPosition(cap, None)
            if position is None or position == self._last_written:
                return
            if self._last_written is not None and _order(position) < _order(self._last_written):
                return  # a cap below what is stored already: never move the checkpoint back
            checkpointer.checkpoint(position.sequence, position.sub_sequence)
            self._last_written = position


def _order(position: ConfirmedPosition) -> tuple[Sequence, float]:
    """Positions in shard order: a whole record after any part of it."""
    return position.sequence, float("inf") if position.sub_sequence is None else position.sub_sequence
