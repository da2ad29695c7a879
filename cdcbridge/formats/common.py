"""The parts both envelopes share: source, seq, pk, and union values tagged with their Avro branch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from cdcbridge import __version__
from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Value
from cdcbridge.changes import Sequence as RecordSequence
from cdcbridge.contract import SEQ_KEY_FORMAT, SEQ_LIMITS, CellOp
from cdcbridge.formats.errors import InvalidRecordError

#: Written into ``source.bridge_version`` so a consumer can tell which bridge produced a message.
BRIDGE_VERSION = __version__

#: An Avro union value in fastavro tuple notation, e.g. ``("long", 5)``; None is the null branch.
TaggedValue = tuple[str, Value] | None

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class MessageItem(NamedTuple):
    """One message of a record: Kafka key bytes, the Avro value (None = tombstone), and its sub-sequence,
    the position inside the record that the bridge checkpoints so a restart neither skips nor repeats it."""

    key: bytes
    value: dict[str, Any] | None
    sub_sequence: int


#: Avro branch of each exact value type (the fast path of tagged_value; subclasses take the general path).
_BRANCH_OF_TYPE: dict[type, str] = {bool: "boolean", float: "double", str: "string", bytes: "bytes"}


def tagged_value(value: object, *, table: str, column: str) -> TaggedValue:
    """Tag a cell value with its Avro branch so fastavro never guesses (True stays boolean, never long)."""
    if value is None:
        return None
    kind = type(value)
    if kind is int and INT64_MIN <= value <= INT64_MAX:  # type: ignore[operator]
        return ("long", value)  # type: ignore[return-value]
    branch = _BRANCH_OF_TYPE.get(kind)
    if branch is not None:
        return (branch, value)  # type: ignore[return-value]
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidRecordError(f"table {table!r} column {column!r}: {value} does not fit a long (int64)")
        return ("long", value)
    if isinstance(value, float):
        return ("double", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, bytes | bytearray):
        return ("bytes", bytes(value))
    raise InvalidRecordError(
        f"table {table!r} column {column!r} holds {type(value).__name__} {value!r:.60}; "
        "only int, float, bool, str and bytes can be written"
    )


def check_cell(record: ChangeRecord, cell: Cell) -> None:
    """Refuse cells Tablestore cannot produce (a decoder bug): a PUT without value, a version delete without version."""
    if cell.op is CellOp.PUT and cell.value is None:
        raise InvalidRecordError(
            f"table {record.table!r} column {cell.name!r}: PUT cell without a value (decoder bug?)"
        )
    if cell.op is CellOp.DELETE_ONE_VERSION and cell.timestamp_ms is None:
        raise InvalidRecordError(
            f"table {record.table!r} column {cell.name!r}: DELETE_ONE_VERSION cell without the version it deletes"
        )


#: Plain-string names of the enums (a StrEnum's .value is a slow property on the per-message path).
ACTION_NAMES = {action: action.value for action in RecordAction}
CELL_OP_NAMES = {op: op.value for op in CellOp}

_EPOCH_LIMIT, _TIMESTAMP_LIMIT, _ROW_LIMIT, _OP_LIMIT = (
    SEQ_LIMITS["epoch"],
    SEQ_LIMITS["timestamp_us"],
    SEQ_LIMITS["row_index"],
    SEQ_LIMITS["op_index"],
)


def source_block(record: ChangeRecord, instance: str) -> dict[str, Any]:
    """The ``source`` field: where the record was read."""
    return {
        "instance": instance,
        "table": record.table,
        "shard_id": record.shard_id,
        "record_type": ACTION_NAMES[record.action],
        "bridge_version": BRIDGE_VERSION,
    }


def seq_block(sequence: RecordSequence, op_index: int) -> dict[str, Any]:
    """The ``seq`` field; refuses numbers that would overflow seq_key's zero padding and break its sort order."""
    epoch, timestamp_us, row_index = sequence.epoch, sequence.timestamp_us, sequence.row_index
    if (
        0 <= epoch < _EPOCH_LIMIT
        and 0 <= timestamp_us < _TIMESTAMP_LIMIT
        and 0 <= row_index < _ROW_LIMIT
        and 0 <= op_index < _OP_LIMIT
    ):
        return {
            "epoch": epoch,
            "timestamp_us": timestamp_us,
            "row_index": row_index,
            "op_index": op_index,
            "seq_key": SEQ_KEY_FORMAT % (epoch, timestamp_us, row_index, op_index),
        }
    numbers = {
        "epoch": sequence.epoch,
        "timestamp_us": sequence.timestamp_us,
        "row_index": sequence.row_index,
        "op_index": op_index,
    }
    for name, number in numbers.items():
        if not 0 <= number < SEQ_LIMITS[name]:
            raise InvalidRecordError(
                f"sequence {sequence.to_text()} op {op_index}: {name}={number} is outside "
                f"[0, {SEQ_LIMITS[name]}), so seq_key would not sort"
            )
    return {**numbers, "seq_key": sequence.key(op_index)}


def pk_block(record: ChangeRecord) -> list[dict[str, Any]]:
    """The ``pk`` field: primary-key columns in table-schema order, each value tagged long/string/bytes."""
    columns = []
    for name, value in record.primary_key:
        if isinstance(value, bool) or not isinstance(value, int | str | bytes):
            raise InvalidRecordError(
                f"table {record.table!r} primary-key column {name!r} holds {type(value).__name__} {value!r}; "
                "Tablestore primary keys are INTEGER, STRING or BINARY"
            )
        columns.append({"name": name, "value": tagged_value(value, table=record.table, column=name)})
    return columns


def common_fields(
    record: ChangeRecord, *, instance: str, op_index: int, pk: Sequence[dict[str, Any]], row_deleted: bool
) -> dict[str, Any]:
    """The fields every envelope starts with, in schema order."""
    return {
        "source": source_block(record, instance),
        "seq": seq_block(record.sequence, op_index),
        "timestamp": record.timestamp_ms,
        "pk": list(pk),
        "row_deleted": row_deleted,
    }
