"""Exception family of the coordination layer.

Every error a caller may want to react to has its own type; the message names the lease or shard and what to do.
"""

from __future__ import annotations


class CoordinationError(Exception):
    """Base of every error raised by cdcbridge.coordination."""


class LeaseStoreError(CoordinationError):
    """The lease store could not be reached or refused the request for a reason other than a lost race."""


class LeaseStoreUnavailableError(LeaseStoreError):
    """The store did not answer (timeout, 5xx, network) even after retries; the outcome of a write is unknown
    and could not be resolved by re-reading. Callers keep their state and try again on the next cycle."""


class LeaseLostError(CoordinationError):
    """A conditional lease write failed: another worker changed the lease first. Never retried: the caller
    lost the race and must stop acting as owner (KCL: the lease is lost, do not checkpoint)."""

    def __init__(self, shard_id: str, detail: str) -> None:
        super().__init__(f"lease for shard {shard_id!r} is no longer ours: {detail}")
        self.shard_id = shard_id


class CheckpointError(CoordinationError):
    """A checkpoint request was refused before reaching the store."""


class CheckpointOutOfRangeError(CheckpointError, ValueError):
    """The requested checkpoint is behind the last one or beyond what was handed to the processor."""


class CheckpointerClosedError(CheckpointError):
    """The shard consumer this checkpointer belonged to has ended (handed over, released or restarted);
    checkpoints must come from the current incarnation's checkpointer."""


class WorkerFencedError(CoordinationError):
    """No lease renewal or take reached the store for too long: the worker cannot know which leases it still
    holds, so it aborted every consumer without checkpointing. Restart the process once the store is reachable."""


class ProcessorNotReadyError(CoordinationError):
    """Raised by a RecordProcessor's initialize() when it cannot start yet for an expected, passing reason (e.g. a
    table's snapshot still runs): the shard retries after the task back-off, logged as one line, not a failure."""


class StreamError(CoordinationError):
    """Base of errors raised by a stream adapter (RecordFetcher / ShardLister implementations)."""


class TrimmedDataError(StreamError):
    """The position read lies before the stream's retention (Tablestore OTSTrimmedDataAccess).
    Not retryable at the same position: restart from the oldest retained record."""


class ShardNotFoundError(StreamError):
    """The shard no longer exists (all of its data expired). Nothing more can be read from it."""


class InvalidPositionError(StreamError):
    """The service cannot use the read position (an iterator edited by hand, or from another stream): reading it
    again will never work, so the shard re-reads from its oldest retained record, skipping what was confirmed."""


class StreamUnavailableError(StreamError):
    """A transient failure reading the stream; the same call may be retried later."""
