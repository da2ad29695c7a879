"""Errors of base + incremental replication; each message names the table and what to do."""

from __future__ import annotations

from cdcbridge.coordination.errors import ProcessorNotReadyError


class SnapshotError(Exception):
    """A snapshot cannot start or go on; `cdcbridge snapshot` can be run again once the cause is fixed."""


class SnapshotRefusedError(SnapshotError):
    """Bridge workers are running for the table: their messages could overtake the snapshot's images."""


class SnapshotConflictError(SnapshotError):
    """Another snapshot of the same table started at the same moment."""


class SnapshotExportError(SnapshotError):
    """A range could not be read or a message was refused by Kafka; progress stops before it (resumable)."""


class SnapshotInProgressError(SnapshotError, ProcessorNotReadyError):
    """The table's snapshot is still running: the bridge may not produce its stream records yet."""


class SplitPointsError(SnapshotError):
    """The source could not split the table's key range."""


class SnapshotStateError(SnapshotError):
    """The snapshot rows in the status table are unreadable or could not be written."""
