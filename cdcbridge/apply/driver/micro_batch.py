"""One micro-batch on the driver: Kafka records → operations per table → fold onto the target's rows → one write.

Spark-free: the job streams the batch's :class:`~cdcbridge.apply.driver.kafka_records.KafkaRecord` objects (bounded by
``maxOffsetsPerTrigger``) here with the Spark batch id. Steps:

1. Turn every record into an operation with the pure core's ``decode_message``; undecodable values, tables the
   configuration does not apply and contradictory envelopes are bad input (stop, or a dead letter).
2. Per table, skip it if the target's marker shows this batch already committed (a re-run batch is a no-op).
3. Read the target's current rows of the batch's keys, fold (dedup, seq order, guard), let the target refuse rows
   it cannot store (bad input: all the row's operations of the batch become dead letters).
4. One ``write`` of the changed rows, the dead letters and the (app id, batch id) marker.

A bare tombstone (null value) carries only the key's values; the primary-key column names come from the batch's
other messages of the table or from the target. When neither knows them, the target does not hold the table, so
the row is absent and the delete has nothing to do: it is skipped and counted (``tombstones_unknown_table``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from cdcbridge.apply.batch_report import BatchReport, quantiles
from cdcbridge.apply.core.batch import DecodedBatch, fold_decoded
from cdcbridge.apply.core.dedup import group_by_row
from cdcbridge.apply.core.marker import BatchMarker, batch_already_applied
from cdcbridge.apply.core.model import TargetRow
from cdcbridge.apply.core.operations import Operation, decode_message
from cdcbridge.apply.core.policy import BadInputPolicy, DeadLetter
from cdcbridge.apply.driver.kafka_records import KafkaRecord, envelope, tombstone, undecodable
from cdcbridge.apply.errors import BadInputError, TargetRejectedError, UndecodableMessageError, UnmappedTableError
from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.target import ApplyTarget, TargetBatch
from cdcbridge.contract import MessageFormat


@dataclass
class _Collected:
    """Operations per table plus what was set aside while decoding."""

    operations: dict[str, list[Operation]] = field(default_factory=dict)
    tombstones: list[tuple[KafkaRecord, str]] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    messages: int = 0


class MicroBatchApplier:
    """Applies micro-batches of one job (one app id) to one target."""

    def __init__(self, target: ApplyTarget, routing: TopicRouting, app_id: str, policy: BadInputPolicy) -> None:
        self.target = target
        self.routing = routing
        self.app_id = app_id
        self.policy = policy

    def apply(self, batch_id: int, records: Iterable[KafkaRecord]) -> BatchReport:
        report = BatchReport(batches=1)
        marker = BatchMarker(self.app_id, batch_id)
        started = time.perf_counter()
        collected = self._collect(records, report)
        self._add_tombstones(collected, report)
        report.seconds_decode = time.perf_counter() - started
        rows: dict[str, list[TargetRow]] = {}
        dead_letters = list(collected.dead_letters)
        report.stats.messages = collected.messages
        report.stats.dead_lettered = len(collected.dead_letters)
        applied_tables = 0
        for table in sorted(collected.operations):
            if batch_already_applied(self.target.read_marker(table, self.app_id), self.app_id, batch_id):
                report.tables_skipped += 1
                continue
            applied_tables += 1
            table_rows, table_dead = self._fold_table(table, collected.operations[table], report)
            if table_rows:
                rows[table] = table_rows
            dead_letters.extend(table_dead)
        if collected.operations and not applied_tables:
            report.batches_skipped = 1
        if rows or dead_letters:
            started = time.perf_counter()
            report.rows_written = self.target.write(TargetBatch(marker, rows, dead_letters))
            report.seconds_write = time.perf_counter() - started
            report.rows_by_table = {table: len(table_rows) for table, table_rows in rows.items()}
            report.source_ts_sample = quantiles(
                [row.source_ts for table_rows in rows.values() for row in table_rows if row.source_ts is not None]
            )
        return report

    # --- step 1: records → operations ----------------------------------------------------------------------------

    def _collect(self, records: Iterable[KafkaRecord], report: BatchReport) -> _Collected:
        collected = _Collected()
        for record in records:
            collected.messages += 1
            message = None
            try:
                if record.tombstone:
                    self._route_tombstone(record, collected, report)
                    continue
                if not record.has_envelope:
                    raise undecodable(record)
                message = envelope(record)
                operation = decode_message(message, message_format=record.message_format)
                if self._check_table(record, operation):
                    collected.operations.setdefault(operation.table, []).append(operation)
                else:
                    report.other_format += 1
            except BadInputError as error:
                kept = message if message is not None else record.raw_message()
                collected.dead_letters.append(self.policy.handle(error, kept))
        return collected

    def _route_tombstone(self, record: KafkaRecord, collected: _Collected, report: BatchReport) -> None:
        route = self.routing.route(record.topic)
        if route is None:
            raise UnmappedTableError(
                f"tombstone (null value) on topic {record.topic!r}, which is no configured table's topic",
                location=record.location,
            )
        if route.message_format is not MessageFormat.RECORD_IMAGE:
            raise UndecodableMessageError(
                f"null value on MUTATE_LOG topic {record.topic!r}; only RECORD_IMAGE topics carry tombstones",
                location=record.location,
            )
        if not self.routing.is_applied(route.table, MessageFormat.RECORD_IMAGE):
            report.other_format += 1
            return
        collected.tombstones.append((record, route.table))

    def _check_table(self, record: KafkaRecord, operation: Operation) -> bool:
        """Whether the operation is applied (False: its table is applied from the other format); raises for a
        table the configuration does not map to the target."""
        route = self.routing.route(record.topic)
        if route is not None and route.table != operation.table:
            raise UnmappedTableError(
                f"message of table {operation.table!r} on topic {record.topic!r}, which carries table {route.table!r}",
                location=record.location,
            )
        if route is not None and route.message_format is not operation.message_format:
            raise UndecodableMessageError(
                f"{operation.message_format.value} message on topic {record.topic!r}, which carries "
                f"{route.message_format.value}",
                location=record.location,
            )
        if not self.routing.knows_table(operation.table):
            raise UnmappedTableError(
                f"message of table {operation.table!r}, which is not in source.tables", location=record.location
            )
        return self.routing.is_applied(operation.table, operation.message_format)

    def _add_tombstones(self, collected: _Collected, report: BatchReport) -> None:
        for record, table in collected.tombstones:
            names = self._pk_names(table, collected)
            if names is None:
                report.tombstones_unknown_table += 1
                continue
            try:
                operation = decode_message(tombstone(record, table, names), message_format=MessageFormat.RECORD_IMAGE)
            except BadInputError as error:
                collected.dead_letters.append(self.policy.handle(error, record.raw_message()))
                continue
            collected.operations.setdefault(table, []).append(operation)

    def _pk_names(self, table: str, collected: _Collected) -> tuple[str, ...] | None:
        for operation in collected.operations.get(table, ()):
            if not operation.tombstone:
                return tuple(name for name, _ in operation.pk)
        return self.target.pk_names(table)

    # --- steps 3-4: fold a table ----------------------------------------------------------------------------------

    def _fold_table(
        self, table: str, operations: list[Operation], report: BatchReport
    ) -> tuple[list[TargetRow], list[DeadLetter]]:
        started = time.perf_counter()
        by_row = group_by_row(operations)
        current = self.target.read_rows(table, [pk for _, pk in by_row])
        read_done = time.perf_counter()
        report.seconds_read += read_done - started
        result = fold_decoded(
            DecodedBatch(by_row, [], 0), {(table, pk): row for pk, row in current.items()}, policy=self.policy
        )
        stats = result.stats
        stats.messages = 0  # counted once per record in _collect
        report.stats += stats
        rows = result.rows
        dead_letters = list(result.dead_letters)
        for pk, reason in self.target.refused_rows(table, list(rows.values())).items():
            rows.pop((table, pk), None)
            report.stats.rows_changed -= 1
            for operation in by_row.get((table, pk), ()):
                error = TargetRejectedError(
                    f"{self.target.name} target cannot store row {dict(pk)} of table {table!r}: {reason}",
                    location=operation.location,
                )
                dead_letters.append(self.policy.handle(error, operation.message))
                report.stats.dead_lettered += 1
        report.seconds_fold += time.perf_counter() - read_done
        return list(rows.values()), dead_letters
