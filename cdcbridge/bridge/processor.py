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
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cdcbridge.bridge.acks import AckTracker, ConfirmedPosition, PendingRecord
from cdcbridge.bridge.row_lookup import CurrentRow
from cdcbridge.changes import ChangeRecord, Value
from cdcbridge.coordination.errors import CheckpointError, LeaseLostError, LeaseStoreUnavailableError
from cdcbridge.coordination.processor import (
    InitializationInput,
    ProcessRecordsInput,
    RecordProcessor,
    RecordProcessorCheckpointer,
    ShutdownInput,
    ShutdownReason,
)
from cdcbridge.formats.keys import record_key
from cdcbridge.formats.table_format import BridgeTableFormat, MessageFormat
from cdcbridge.formats.table_messages import needs_row_lookup
from cdcbridge.kafka.errors import KafkaSideError, MessageTooLargeError
from cdcbridge.kafka.sink import Delivery, MessageSink
from cdcbridge.publish.record_encoder import FastEncoder, RecordEncodeError, RecordEncoder

log = logging.getLogger(__name__)

#: Reads current rows of a table for update lookup: (table, primary keys) → rows in the same order.
RowReader = Callable[[str, list[list[tuple[str, Value]]]], list[CurrentRow | None]]


class BridgeProcessingError(Exception):
    """A shard cannot go on until the cause is fixed; the shard restarts from its checkpoint."""


#: Kafka header carrying a tombstone's seq_key: the apply job applies a bare tombstone only with it (a tombstone
#: re-sent after a restart must not delete a row that a later image re-created).
TOMBSTONE_SEQ_HEADER = "cdcbridge-seq-key"
#: Kafka header of a dead-letter reference: why the original message is not on its topic.
DEAD_LETTER_REASON_HEADER = "cdcbridge-dead-letter-reason"


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
        self._tracker = AckTracker()
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
        self._dead_letters: deque[tuple[PendingRecord, int, str, str, bytes, MessageTooLargeError]] = deque()

    # ----------------------------------------------------------------------------------- RecordProcessor
    def initialize(self, initialization: InitializationInput) -> None:
        self._shard_id = initialization.shard_id
        if self._context.stream_start is not None:
            self._start_us = self._context.stream_start()
        self._pump = threading.Thread(target=self._pump_checkpoints, name=f"ckpt-{self._shard_id}", daemon=True)
        self._pump.start()

    def process_records(self, records: ProcessRecordsInput) -> None:
        self._raise_if_failed()
        self._checkpointer = records.checkpointer
        if self._past_end_time:
            return  # later records are later still: nothing more is produced or checkpointed for this shard
        context = self._context
        batch = self._within_end_time(records.records)
        start_us = self._start_us
        produced_records = batch if start_us is None else [r for r in batch if r.sequence.timestamp_us >= start_us]
        rows = self._lookup_rows(produced_records)  # the skipped records need no row read back
        # Per message, the work below is most of the bridge's time: names are bound once per batch.
        encode, produce = self._encoder.encode, context.sink.produce
        register, ack_callback = self._tracker.register, self._ack_callback
        shard_id = self._shard_id
        produced = skipped = 0
        for record in batch:
            if start_us is not None and record.sequence.timestamp_us < start_us:
                register(record.sequence, 0)  # covered by the snapshot: handled, nothing to send
                skipped += 1
                continue
            if not record.shard_id:
                record.shard_id = shard_id  # iterators are opaque: we know the shard here
            try:
                messages = encode(record, rows.get(id(record)))
            except RecordEncodeError as error:
                raise BridgeProcessingError(f"{error} (shard {shard_id})") from error
            key = record_key(record)
            first_sub = records.start_sub_sequence(record)
            pending = register(record.sequence, len(messages), first_sub)
            for sub_sequence in range(first_sub, len(messages)):
                topic, message_format, value = messages[sub_sequence]
                headers = None
                if value is None:  # the tombstone after a row-deleted image: same seq as that image
                    headers = [(TOMBSTONE_SEQ_HEADER, record.sequence.key(0).encode())]
                produce(topic, key, value, ack_callback(pending, sub_sequence, topic, message_format, key), headers)
            produced += len(messages) - first_sub
        if context.on_produced is not None:
            context.on_produced(produced)
        if skipped:
            self._count_skipped(skipped)

    def shutdown(self, shutdown: ShutdownInput) -> None:
        self._checkpointer = shutdown.checkpointer
        try:
            if shutdown.reason is ShutdownReason.LEASE_LOST:
                return  # a checkpoint would be refused; in-flight acks no longer matter to this owner
            if shutdown.reason is ShutdownReason.SHARD_END:
                # Children may start only after every message of this shard is acknowledged.
                while not self._tracker.wait_all_acked(1.0):
                    self._raise_if_failed()
                self._raise_if_failed()
                # Past the end time, records after it were handed out but not produced: no SHARD_END over them.
                self._write_checkpoint(final=not self._past_end_time)
                return
            if shutdown.reason in (ShutdownReason.STOLEN, ShutdownReason.REQUESTED):
                self._tracker.wait_all_acked(shutdown.timeout_seconds)
                self._write_checkpoint(final=False)
        finally:
            self._stop_pump.set()
            if self._skipped:
                log.info("shard %s of table %s: %d record(s) before the snapshot start skipped in this run",
                         self._shard_id, self._context.table, self._skipped)  # fmt: skip

    # ----------------------------------------------------------------------------------- internals
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
        return {id(record): row for record, row in zip(wanted, rows, strict=True)}

    def _ack_callback(
        self, pending: PendingRecord, sub_sequence: int, topic: str, message_format: MessageFormat, key: bytes
    ) -> Callable[[Delivery], None]:
        """The message's acknowledgement handler; it keeps only these small parts of the message, never its value."""

        def on_ack(delivery: Delivery) -> None:
            error = delivery.error
            if error is None:
                self._tracker.ack(pending, sub_sequence)
            elif (
                isinstance(error, MessageTooLargeError)
                and self._context.dead_letter_topic is not None
                and error.size > self._context.dead_letter_over_bytes
            ):
                self._dead_letters.append((pending, sub_sequence, topic, str(message_format), key, error))  # pump sends
            else:
                self._record_failure(error)

        return on_ack

    def _send_dead_letters(self) -> None:
        """Replace each refused oversize message by a small reference on the dead-letter topic; the message counts as
        delivered once that reference is acknowledged, so the checkpoint moves on without a silent skip."""
        topic = self._context.dead_letter_topic
        while topic is not None and self._dead_letters:
            pending, sub_sequence, refused_topic, message_format, key, error = self._dead_letters.popleft()
            reference = {
                "reason": "message_too_large",
                "table": self._context.table,
                "shard_id": self._shard_id,
                "topic": refused_topic,
                "format": message_format,
                "key": key.decode("utf-8", "replace"),
                "seq_key": pending.sequence.key(0),
                "sub_sequence": sub_sequence,
                "size": error.size,
                "error": str(error),
            }
            log.error(
                "shard %s of table %s: message for key %s on topic %s is %d bytes, too large for Kafka; a reference "
                "went to the dead-letter topic %s (re-read the row from the source to recover it)",
                self._shard_id, self._context.table, reference["key"], refused_topic, error.size, topic,
            )  # fmt: skip

            def on_reference_ack(delivery: Delivery, pending: PendingRecord = pending, sub: int = sub_sequence) -> None:
                if delivery.error is None:
                    self._tracker.ack(pending, sub)
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
            if position is None or position == self._last_written:
                return
            checkpointer.checkpoint(position.sequence, position.sub_sequence)
            self._last_written = position
