"""Fold one row's operations, in seq order and through the guard, onto the row's current target state.

What one operation does (:func:`apply_operation`):

MUTATE_LOG
- ``row_deleted`` (DELETE): soft delete. The columns are cleared, ``_deleted`` is set, the op's seq is kept.
- ``replace_row`` (PUT): the columns are cleared and the row is live, then its cells apply.
- Cells, in message order:
  - PUT(value, version v): sets the column if it holds no version or v ≥ its version. v is the message
    ``timestamp`` when the cell has none. An older version does not change what a reader of the latest version
    sees, and the target keeps only the latest version, so it is not stored.
  - DELETE_ALL_VERSION: removes the column.
  - DELETE_ONE_VERSION(v): removes the column only if v is the version held (the latest known one). Deleting
    an older version changes nothing. Deleting the latest removes the column even if the source still holds
    older versions; the target never kept them (exact for tables with max_versions=1).
  - INCREMENT: sets ``value`` when the message carries the result (idempotent on its own); otherwise adds
    ``amount`` to the held integer (an absent column counts as 0). The version becomes the cell version (or the
    message timestamp). A column holding a non-integer gives :class:`IncrementError`.
- A deleted (or never written) row comes back to life with any operation that writes a value (a PUT or
  INCREMENT cell, or ``replace_row``). An UPDATE with only deletes leaves a deleted row deleted (there is nothing
  to delete), but it is still applied and its seq kept. Column deletes never delete the row itself.

RECORD_IMAGE
- ``row_deleted``: soft delete, as above. A tombstone never changes a row that is already deleted or absent.
- Full image: the row becomes exactly its columns and is live.
- Partial image (the row was gone when the bridge read it back): its cells merge onto the current row. A value
  is put as a cell PUT is; a null value without version removes the column; a null value with version v
  removes it if v is the version held. A partial image without any value leaves a deleted row deleted. A
  ``row_deleted`` image always follows a partial one, so this only shapes intermediate states.

Every applied operation sets ``_seq`` to its seq_key and ``_source_ts`` to its timestamp.

The fold (:func:`fold_row`): drop redeliveries (:mod:`~cdcbridge.apply.core.dedup`) and seq-less tombstones
(:mod:`~cdcbridge.apply.core.tombstones`), sort by seq_key, and apply each operation newer than the row's ``_seq``
(:mod:`~cdcbridge.apply.core.guard`). Older ones count as stale. An operation that fails at fold time (only INCREMENT
can) is all-or-nothing: with the dead-letter policy the row stays as it was before it and ``_seq`` does not
advance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields

from cdcbridge.apply.core.dedup import dedup_operations
from cdcbridge.apply.core.guard import is_newer
from cdcbridge.apply.core.model import ColumnValue, TargetRow
from cdcbridge.apply.core.operations import CellChange, Operation
from cdcbridge.apply.core.policy import BadInputPolicy, DeadLetter
from cdcbridge.apply.core.tombstones import drop_seqless_tombstones
from cdcbridge.apply.errors import BadInputError, IncrementError, InvalidGroupError
from cdcbridge.changes import Value
from cdcbridge.contract import CellOp, MessageFormat

_WRITING_CELL_OPS = frozenset({CellOp.PUT, CellOp.INCREMENT})


@dataclass(slots=True)
class ApplyStats:
    """Counts of what happened to the operations of a fold or a batch (add them up with ``+``)."""

    messages: int = 0
    duplicates: int = 0
    stale: int = 0
    applied: int = 0
    dead_lettered: int = 0
    tombstones_without_seq: int = 0
    tombstones_redundant: int = 0
    rows_changed: int = 0

    def __add__(self, other: ApplyStats) -> ApplyStats:
        return ApplyStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(slots=True)
class FoldResult:
    """The row after the fold. ``changed`` says whether the target must write it (guarded, see
    :mod:`~cdcbridge.apply.core.guard`); ``row`` is None only for a row that never existed and still does not."""

    row: TargetRow | None
    changed: bool
    dead_letters: list[DeadLetter] = field(default_factory=list)
    stats: ApplyStats = field(default_factory=ApplyStats)


def fold_row(
    current: TargetRow | None, operations: Iterable[Operation], *, policy: BadInputPolicy | None = None
) -> FoldResult:
    """Fold the operations of ONE row (any order, redeliveries included) onto its current state.

    `current` is the row as the target holds it (None if it has none). The operations must share (table, pk) and
    one message format (:class:`InvalidGroupError` otherwise). The input row is never modified.
    """
    policy = policy or BadInputPolicy()
    received = list(operations)
    stats = ApplyStats(messages=len(received))
    if not received:
        return FoldResult(current, False, stats=stats)
    _check_group(current, received)
    unique, stats.duplicates = dedup_operations(received)
    usable, stats.tombstones_without_seq = drop_seqless_tombstones(unique)
    first = received[0]
    state = current.copy() if current is not None else TargetRow(first.table, first.pk, deleted=True)
    dead_letters: list[DeadLetter] = []
    for operation in sorted(usable, key=_seq_of):
        if not is_newer(_seq_of(operation), state.seq):
            stats.stale += 1
            continue
        before = (dict(state.columns), state.deleted) if _may_fail(operation) else None
        try:
            effective = _apply(state, operation)
        except BadInputError as error:
            if before is not None:
                state.columns, state.deleted = before
            dead_letters.append(policy.handle(error, operation.message))
            stats.dead_lettered += 1
            continue
        if not effective:
            stats.tombstones_redundant += 1
            continue
        _mark_applied(state, operation)
        stats.applied += 1
    changed = stats.applied > 0
    stats.rows_changed = int(changed)
    return FoldResult(state if changed else current, changed, dead_letters, stats)


def apply_operation(row: TargetRow | None, operation: Operation) -> TargetRow | None:
    """The row after one operation, without guard or dedup (the semantics of the module docstring).

    Returns `row` itself when the operation has no effect (a tombstone on a deleted or absent row). May raise
    :class:`IncrementError`. The input row is never modified.
    """
    state = row.copy() if row is not None else TargetRow(operation.table, operation.pk, deleted=True)
    if not _apply(state, operation):
        return row
    _mark_applied(state, operation)
    return state


def _seq_of(operation: Operation) -> str:
    if operation.seq_key is None:  # drop_seqless_tombstones removed them
        raise AssertionError("operation without seq_key reached the guard")
    return operation.seq_key


def _mark_applied(state: TargetRow, operation: Operation) -> None:
    state.seq = operation.seq_key
    if operation.timestamp_ms is not None:
        state.source_ts = operation.timestamp_ms


def _check_group(current: TargetRow | None, operations: list[Operation]) -> None:
    key = current.key if current is not None else operations[0].row_key
    formats: set[MessageFormat] = set()
    for operation in operations:
        if operation.row_key != key:
            raise InvalidGroupError(
                f"fold_row got operations of two rows: {key!r} and {operation.row_key!r}", location=operation.location
            )
        formats.add(operation.message_format)
    if len(formats) > 1:
        raise InvalidGroupError(
            f"row {key!r} got both RECORD_IMAGE and MUTATE_LOG operations; they share seq_keys, so a row fed "
            "from both would dedup one against the other and could count an increment twice"
        )


def _may_fail(operation: Operation) -> bool:
    return any(cell.op is CellOp.INCREMENT for cell in operation.cells)


def _apply(state: TargetRow, operation: Operation) -> bool:
    """Apply in place; False when the operation has no effect (tombstone on a deleted row)."""
    if operation.row_deleted:
        if operation.tombstone and state.deleted:
            return False
        state.columns.clear()
        state.deleted = True
        return True
    if operation.message_format is MessageFormat.RECORD_IMAGE:
        _apply_image(state, operation)
    else:
        _apply_mutation(state, operation)
    return True


def _revive(state: TargetRow) -> None:
    state.deleted = False
    state.columns.clear()


def _apply_mutation(state: TargetRow, operation: Operation) -> None:
    if operation.replace_row:
        _revive(state)
    elif state.deleted:
        if not any(cell.op in _WRITING_CELL_OPS for cell in operation.cells):
            return
        _revive(state)
    for cell in operation.cells:
        _apply_cell(state, cell, operation)


def _apply_cell(state: TargetRow, cell: CellChange, operation: Operation) -> None:
    columns = state.columns
    version = cell.version if cell.version is not None else operation.timestamp_ms
    if cell.op is CellOp.PUT:
        assert cell.value is not None  # checked by decode_message
        _put(columns, cell.name, cell.value, version)
    elif cell.op is CellOp.DELETE_ALL_VERSION:
        columns.pop(cell.name, None)
    elif cell.op is CellOp.DELETE_ONE_VERSION:
        _delete_version(columns, cell.name, cell.version)
    elif cell.value is not None:
        columns[cell.name] = ColumnValue(cell.value, version)
    else:
        columns[cell.name] = ColumnValue(_incremented(state, cell, operation), version)


def _incremented(state: TargetRow, cell: CellChange, operation: Operation) -> int:
    held = state.columns.get(cell.name)
    base = 0 if held is None else held.value
    if isinstance(base, bool) or not isinstance(base, int) or cell.amount is None:
        raise IncrementError(
            f"MUTATE_LOG message: INCREMENT of column {cell.name!r} by {cell.amount!r} on row {state.key!r}, "
            f"but the column holds {type(base).__name__} {base!r:.60}",
            location=operation.location,
        )
    return base + cell.amount


def _apply_image(state: TargetRow, operation: Operation) -> None:
    if not operation.partial:
        state.deleted = False
        state.columns = {
            name: ColumnValue(cell.value, cell.version)
            for name, cell in operation.columns.items()
            if cell.value is not None
        }
        return
    if state.deleted:
        if all(cell.value is None for cell in operation.columns.values()):
            return
        _revive(state)
    for name, cell in operation.columns.items():
        if cell.value is not None:
            _put(state.columns, name, cell.value, cell.version)
        elif cell.version is None:
            state.columns.pop(name, None)
        else:
            _delete_version(state.columns, name, cell.version)


def _put(columns: dict[str, ColumnValue], name: str, value: Value, version: int | None) -> None:
    held = columns.get(name)
    if held is None or held.version is None or version is None or version >= held.version:
        columns[name] = ColumnValue(value, version)


def _delete_version(columns: dict[str, ColumnValue], name: str, version: int | None) -> None:
    held = columns.get(name)
    if held is not None and held.version == version:
        del columns[name]
