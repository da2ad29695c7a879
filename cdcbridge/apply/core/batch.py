"""One micro-batch in one process: decode, group by row, fold each row onto the target's current state.

This is the whole pure pipeline for the driver path (small batches, tests, a Tablestore target). The Spark job
can run the same steps distributed: :func:`~cdcbridge.apply.core.operations.decode_messages` per partition, group by
(table, Kafka key), join the rows the target holds, then :func:`~cdcbridge.apply.core.fold.fold_row` per group. The
result is the same, because ``fold_row`` dedups and orders on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdcbridge.apply.core.dedup import group_by_row
from cdcbridge.apply.core.fold import ApplyStats, fold_row
from cdcbridge.apply.core.model import RowKey, TargetRow
from cdcbridge.apply.core.operations import Operation, decode_messages
from cdcbridge.apply.core.policy import BadInputPolicy, DeadLetter
from cdcbridge.contract import MessageFormat


@dataclass(slots=True)
class DecodedBatch:
    """A batch's valid operations per target row, and the messages set aside while decoding."""

    operations: dict[RowKey, list[Operation]]
    dead_letters: list[DeadLetter] = field(default_factory=list)
    messages: int = 0

    @property
    def row_keys(self) -> list[RowKey]:
        """The rows the target must read before folding."""
        return list(self.operations)


@dataclass(slots=True)
class BatchResult:
    """``rows``: every row the batch changed, to upsert with the guard; ``dead_letters``: to write aside."""

    rows: dict[RowKey, TargetRow]
    dead_letters: list[DeadLetter] = field(default_factory=list)
    stats: ApplyStats = field(default_factory=ApplyStats)


def decode_batch(
    messages: Iterable[Mapping[str, Any] | None],
    *,
    policy: BadInputPolicy | None = None,
    message_format: MessageFormat | str | None = None,
) -> DecodedBatch:
    """Decode and group a batch's messages (in Kafka order, as far as the caller has it)."""
    received = list(messages)
    operations, dead_letters = decode_messages(received, policy=policy, message_format=message_format)
    return DecodedBatch(group_by_row(operations), dead_letters, len(received))


def fold_decoded(
    decoded: DecodedBatch, current_rows: Mapping[RowKey, TargetRow], *, policy: BadInputPolicy | None = None
) -> BatchResult:
    """Fold every row of a decoded batch; `current_rows` holds the target's rows for ``decoded.row_keys``
    (missing = the target has none)."""
    rows: dict[RowKey, TargetRow] = {}
    dead_letters = list(decoded.dead_letters)
    stats = ApplyStats()
    for key, operations in decoded.operations.items():
        result = fold_row(current_rows.get(key), operations, policy=policy)
        stats += result.stats
        dead_letters.extend(result.dead_letters)
        if result.changed and result.row is not None:
            rows[key] = result.row
    stats.messages = decoded.messages
    stats.dead_lettered += len(decoded.dead_letters)
    return BatchResult(rows, dead_letters, stats)


def fold_batch(
    messages: Iterable[Mapping[str, Any] | None],
    current_rows: Mapping[RowKey, TargetRow],
    *,
    policy: BadInputPolicy | None = None,
    message_format: MessageFormat | str | None = None,
) -> BatchResult:
    """:func:`decode_batch` then :func:`fold_decoded`."""
    decoded = decode_batch(messages, policy=policy, message_format=message_format)
    return fold_decoded(decoded, current_rows, policy=policy)
