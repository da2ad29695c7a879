"""cdcbridge.apply: the apply job. This package holds its pure core (no Spark): per micro-batch, decode the
envelopes (:mod:`.operations`), drop redeliveries (:mod:`.dedup`), fold each row's operations in seq order onto
its target state (:mod:`.fold`) through the seq guard (:mod:`.guard`), and skip a re-run batch (:mod:`.marker`).
Bad input stops the job or becomes a dead letter (:mod:`.policy`); soft-deleted rows are purged later
(:mod:`.purge`).

The job (:mod:`.job`) runs the same rules in the JVM for Delta and PostgreSQL (:mod:`.spark_operations`,
:mod:`.spark_fold`, :mod:`.spark_batch`) and keeps this core as the reference path for batches that need it
(bad input, rows a target refuses) and for the Tablestore target (:mod:`.micro_batch`).
"""

from cdcbridge.apply.batch import BatchResult, DecodedBatch, decode_batch, fold_batch, fold_decoded
from cdcbridge.apply.dedup import dedup_key, dedup_operations, group_by_row
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
from cdcbridge.apply.fold import ApplyStats, FoldResult, apply_operation, fold_row
from cdcbridge.apply.guard import is_newer
from cdcbridge.apply.marker import BatchMarker, batch_already_applied
from cdcbridge.apply.model import ColumnValue, PkValue, PrimaryKey, RowKey, TargetRow
from cdcbridge.apply.operations import (
    SEQ_KEY_LENGTH,
    CellChange,
    ImageCell,
    MessageFormat,
    MutationType,
    Operation,
    decode_message,
    decode_messages,
    tombstone_message,
)
from cdcbridge.apply.policy import BadInputAction, BadInputPolicy, DeadLetter
from cdcbridge.apply.purge import is_purgeable, purge_deleted, purge_horizon_ms
from cdcbridge.apply.tombstones import drop_seqless_tombstones

__all__ = [
    "SEQ_KEY_LENGTH",
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
    "MessageFormat",
    "MessageLocation",
    "MutationType",
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
