"""Typed results of the stream client, so callers never touch protobuf messages."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cdcbridge.changes import ChangeRecord


class StreamStatus(StrEnum):
    """A stream is ENABLING right after it was turned on, then ACTIVE."""

    ENABLING = "ENABLING"
    ACTIVE = "ACTIVE"


@dataclass(frozen=True, slots=True)
class TableStreamDetails:
    """Stream settings of a table (DescribeTable's ``stream_details``); `stream_id` is None while disabled."""

    enabled: bool
    stream_id: str | None = None
    expiration_hours: int | None = None
    last_enable_time_us: int | None = None
    columns_to_get: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """One entry of ListStream."""

    stream_id: str
    table_name: str
    creation_time_us: int


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """A shard and its lineage: a split child has `parent_id`; a merge child also has `parent_sibling_id`.

    A shard may be read only after its parent(s) were read to the end.
    """

    shard_id: str
    parent_id: str | None = None
    parent_sibling_id: str | None = None

    @property
    def parent_ids(self) -> tuple[str, ...]:
        """The shards that must be fully read before this one."""
        return tuple(parent for parent in (self.parent_id, self.parent_sibling_id) if parent)


@dataclass(frozen=True, slots=True)
class StreamDescription:
    """One page of DescribeStream; `next_shard_id` is set while more shards remain (pass it as the next start)."""

    stream_id: str
    table_name: str
    status: StreamStatus
    expiration_hours: int
    creation_time: int
    shards: tuple[ShardInfo, ...]
    next_shard_id: str | None = None


@dataclass(slots=True)
class StreamRecordsPage:
    """One GetStreamRecord answer.

    `next_shard_iterator` is None once a closed shard (after a split or merge) is fully read; on an open shard that
    is caught up the service returns no records and the same iterator. `may_more_record` is only sent by newer
    services (None when absent). A record's pre-image (``origin_record``, sent when the stream was enabled with
    columns to get) is kept undecoded in ``record.extra["origin_record"]``.
    """

    records: list[ChangeRecord]
    next_shard_iterator: str | None
    may_more_record: bool | None = None

    @property
    def shard_closed(self) -> bool:
        """True when the shard has no more records, ever; its children may now be read."""
        return self.next_shard_iterator is None
