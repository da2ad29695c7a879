"""What coordination needs from a change stream, behind two small interfaces.

The Tablestore adapter (over cdcbridge.tablestore.StreamClient) and the in-memory simulator implement them; an
adapter raises TrimmedDataError, ShardNotFoundError or StreamUnavailableError (cdcbridge.coordination.errors).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from cdcbridge.changes import ChangeRecord


class ShardInfo(NamedTuple):
    """A shard as DescribeStream lists it; `parent_sibling_id` is the second parent of a merge."""

    shard_id: str
    parent_id: str | None = None
    parent_sibling_id: str | None = None

    @property
    def parent_ids(self) -> tuple[str, ...]:
        return tuple(p for p in (self.parent_id, self.parent_sibling_id) if p)


class RecordBatch(NamedTuple):
    """One GetStreamRecord answer. `next_iterator is None` means the shard is closed and fully read."""

    records: list[ChangeRecord]
    next_iterator: str | None


class ShardLister(Protocol):
    def list_shards(self, stream_id: str) -> list[ShardInfo]:
        """Every shard of the stream (all DescribeStream pages)."""
        ...


class RecordFetcher(Protocol):
    def get_shard_iterator(self, stream_id: str, shard_id: str) -> str:
        """Iterator at the oldest retained record of the shard (raises ShardNotFoundError if it is gone)."""
        ...

    def get_records(self, iterator: str, limit: int) -> RecordBatch:
        """Up to `limit` records from `iterator` in commit order (raises TrimmedDataError past retention)."""
        ...


class StreamAccess(ShardLister, RecordFetcher, Protocol):
    """Both halves, as the worker receives them."""
