"""What the tasks of one shard consumer share: fixed dependencies and the current processor incarnation."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from cdcbridge.coordination.checkpoint.checkpointer import ShardCheckpointer
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.clock import Clock
from cdcbridge.coordination.leases.held import HeldLease
from cdcbridge.coordination.leases.store import LeaseStore
from cdcbridge.coordination.processor import RecordProcessor, RecordProcessorFactory
from cdcbridge.coordination.settings import CoordinationSettings
from cdcbridge.coordination.stats import CoordinationStats
from cdcbridge.coordination.stream.access import StreamAccess
from cdcbridge.coordination.stream.read_ahead import PageReader
from cdcbridge.coordination.trim_policy import ContinueAfterTrim, TrimPolicy


@dataclass(frozen=True)
class ShardContext:
    """Dependencies of every task of one shard consumer."""

    held: HeldLease
    stream_id: str
    store: LeaseStore
    stream: StreamAccess
    processor_factory: RecordProcessorFactory
    settings: CoordinationSettings
    clock: Clock
    stats: CoordinationStats
    #: Shard ids of the latest DescribeStream listing (None before the first sync).
    listed_shards: Callable[[], frozenset[str] | None]
    #: Set once the processor's "not ready" (ProcessorNotReadyError) was logged: repeats go to DEBUG.
    not_ready_logged: threading.Event = field(default_factory=threading.Event)
    #: Where the next page of a shard is read while the current one is processed (None: read when asked).
    read_ahead: Executor | None = None
    #: Decides what a read that hits trimmed data does (resume from the oldest record, or halt the shard).
    trim_policy: TrimPolicy = field(default_factory=ContinueAfterTrim)

    @property
    def shard_id(self) -> str:
        return self.held.shard_id

    def lease_is_fresh(self) -> bool:
        return self.held.is_fresh(self.clock.monotonic(), self.settings.self_fence_after_seconds)


@dataclass
class Incarnation:
    """One processor instance with its checkpointer and fetch cursor; replaced on restart."""

    processor: RecordProcessor
    checkpointer: ShardCheckpointer
    #: Next iterator to read; None once the shard's end was read. Never moved by checkpoints (§5.4).
    fetch_cursor: str | None
    #: Records at or before this position were confirmed by an earlier owner and are skipped.
    resume_point: ExtendedSequence | None
    #: Reads the pages at fetch_cursor (and the next one ahead).
    pages: PageReader
    #: Reads in a row that failed with a non-transient error (backs off longer and logs less with each).
    read_failures: int = 0
    #: Reads in a row refused by the trim policy (the shard is halted at its checkpoint).
    halted_reads: int = 0
