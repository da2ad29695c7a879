"""Lease-coordinated shard workers: the Tablestore Stream Client semantics, with the fixes of research/leases.md §5.

Knows nothing of formats, Kafka or Spark: it runs any RecordProcessor. Entry points: `Worker` / `run_worker`
(a store, a stream adapter, a processor factory, settings and a worker id), `TablestoreLeaseStore` /
`InMemoryLeaseStore`, and the processor API in `cdcbridge.coordination.processor`.
"""

from cdcbridge.coordination.checkpoint.positions import SHARD_END, TRIM_HORIZON, ExtendedSequence
from cdcbridge.coordination.clock import Clock, FakeClock, SystemClock
from cdcbridge.coordination.errors import (
    CheckpointerClosedError,
    CheckpointError,
    CheckpointOutOfRangeError,
    CoordinationError,
    LeaseLostError,
    LeaseStoreError,
    LeaseStoreUnavailableError,
    ShardNotFoundError,
    StreamError,
    StreamUnavailableError,
    TrimmedDataError,
    WorkerFencedError,
)
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.leases.memory_store import InMemoryLeaseStore, WriteFault
from cdcbridge.coordination.leases.store import LeaseStore
from cdcbridge.coordination.processor import (
    InitializationInput,
    ProcessRecordsInput,
    RecordProcessor,
    RecordProcessorCheckpointer,
    RecordProcessorFactory,
    ShutdownInput,
    ShutdownReason,
)
from cdcbridge.coordination.settings import CoordinationSettings
from cdcbridge.coordination.stats import CoordinationStats
from cdcbridge.coordination.stream.access import RecordBatch, RecordFetcher, ShardInfo, ShardLister, StreamAccess
from cdcbridge.coordination.worker import Worker, WorkerState, run_worker

__all__ = [
    "SHARD_END",
    "TRIM_HORIZON",
    "CheckpointError",
    "CheckpointOutOfRangeError",
    "CheckpointerClosedError",
    "Clock",
    "CoordinationError",
    "CoordinationSettings",
    "CoordinationStats",
    "ExtendedSequence",
    "FakeClock",
    "InMemoryLeaseStore",
    "InitializationInput",
    "Lease",
    "LeaseLostError",
    "LeaseStore",
    "LeaseStoreError",
    "LeaseStoreUnavailableError",
    "ProcessRecordsInput",
    "RecordBatch",
    "RecordFetcher",
    "RecordProcessor",
    "RecordProcessorCheckpointer",
    "RecordProcessorFactory",
    "ShardInfo",
    "ShardLister",
    "ShardNotFoundError",
    "ShutdownInput",
    "ShutdownReason",
    "StreamAccess",
    "StreamError",
    "StreamUnavailableError",
    "SystemClock",
    "TrimmedDataError",
    "Worker",
    "WorkerFencedError",
    "WorkerState",
    "WriteFault",
    "run_worker",
]


def __getattr__(name: str) -> object:
    # The Tablestore store imports the SDK; load it only when asked for.
    if name == "TablestoreLeaseStore":
        from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore

        return TablestoreLeaseStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
