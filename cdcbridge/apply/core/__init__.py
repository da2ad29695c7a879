"""The apply job's pure rules: decode an envelope, drop redeliveries, fold a row's operations through the guard.

No Spark, no Kafka, no I/O: the reference path (`driver/`), the Spark path's tests and the targets build on these.
"""

from cdcbridge.apply.core.batch import BatchResult, DecodedBatch, decode_batch, fold_batch, fold_decoded
from cdcbridge.apply.core.dedup import dedup_key, dedup_operations, group_by_row
from cdcbridge.apply.core.fold import ApplyStats, FoldResult, apply_operation, fold_row
from cdcbridge.apply.core.guard import is_newer
from cdcbridge.apply.core.marker import BatchMarker, batch_already_applied
from cdcbridge.apply.core.model import ColumnValue, PkValue, PrimaryKey, RowKey, TargetRow
from cdcbridge.apply.core.operations import (
    CellChange,
    ImageCell,
    Operation,
    decode_message,
    decode_messages,
    tombstone_message,
)
from cdcbridge.apply.core.policy import BadInputAction, BadInputPolicy, DeadLetter
from cdcbridge.apply.core.purge import is_purgeable, purge_deleted, purge_horizon_ms
from cdcbridge.apply.core.tombstones import drop_seqless_tombstones
from cdcbridge.apply.errors import (
    ApplyError,
    BadInputError,
    IncrementError,
    InvalidBatchMarkerError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidSettingError,
    MessageLocation,
)

__all__ = [
    "ApplyError",
    "ApplyStats",
    "BadInputAction",
    "BadInputError",
    "BadInputPolicy",
    "BatchMarker",
    "BatchResult",
    "CellChange",
    "ColumnValue",
    "DeadLetter",
    "DecodedBatch",
    "FoldResult",
    "ImageCell",
    "IncrementError",
    "InvalidBatchMarkerError",
    "InvalidGroupError",
    "InvalidMessageError",
    "InvalidSettingError",
    "MessageLocation",
    "Operation",
    "PkValue",
    "PrimaryKey",
    "RowKey",
    "TargetRow",
    "apply_operation",
    "batch_already_applied",
    "decode_batch",
    "decode_message",
    "decode_messages",
    "dedup_key",
    "dedup_operations",
    "drop_seqless_tombstones",
    "fold_batch",
    "fold_decoded",
    "fold_row",
    "group_by_row",
    "is_newer",
    "is_purgeable",
    "purge_deleted",
    "purge_horizon_ms",
    "tombstone_message",
]
