"""A table's change stream: shards over primary-key hash ranges, their record logs, lineage, retention, iterators.

Records are stored already encoded (PlainBuffer, one row with its sequence extension) so GetStreamRecord only
slices a list. A shard owns a half-open range of the 64-bit key-hash space; the open shards always partition the
whole space, so every write lands in exactly one open shard. Split closes a shard and opens two children
(`parent_id`); merge closes two adjacent shards and opens one child (`parent_id`, `parent_sibling_id`). Because
the table's commit clock only moves forward, every record of a parent precedes every record of its children.
"""

from __future__ import annotations

import base64
import binascii
import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from cdcbridge.emulator.errors import ObjectNotExist, ParameterInvalid, TrimmedDataAccess
from cdcbridge.emulator.keys import HASH_SPACE

#: Streams keep records for at most this many hours (the service's 7-day limit).
MAX_EXPIRATION_HOURS = 168
#: GetStreamRecord returns at most this many records per call; `limit` defaults to DEFAULT_RECORD_LIMIT.
MAX_RECORD_LIMIT = 1000
DEFAULT_RECORD_LIMIT = 100
#: And stops early once the records it collected reach this many bytes (like the service's response cap).
MAX_RECORD_BYTES = 4 * 1024 * 1024
_US_PER_HOUR = 3600 * 1_000_000


class StreamAction(IntEnum):
    """Numbers as in the protobuf `ActionType`."""

    PUT_ROW = 1
    UPDATE_ROW = 2
    DELETE_ROW = 3


@dataclass(slots=True)
class StreamRecord:
    """One committed row mutation. `payload` is the PlainBuffer block the wire carries; `origin` the optional
    pre-image block (StreamSpecification.columns_to_get)."""

    sequence: tuple[int, int, int]
    action: StreamAction
    payload: bytes
    origin: bytes | None = None

    @property
    def timestamp_us(self) -> int:
        return self.sequence[1]

    def __reduce__(self) -> tuple[object, ...]:
        """Compact pickling: snapshots hold millions of records."""
        return (_restore_record, (self.sequence, int(self.action), self.payload, self.origin))


_ACTIONS = {action.value: action for action in StreamAction}


def _restore_record(sequence: tuple[int, int, int], action: int, payload: bytes, origin: bytes | None) -> StreamRecord:
    return StreamRecord(sequence, _ACTIONS[action], payload, origin)


def _record_time(record: StreamRecord) -> int:
    return record.sequence[1]


@dataclass(slots=True)
class Shard:
    """A shard's identity, lineage, hash range [hash_start, hash_end) and record log. Offsets are absolute:
    trimming raises `base_offset` instead of renumbering, so iterators stay valid."""

    shard_id: str
    hash_start: int
    hash_end: int
    created_at_us: int
    parent_id: str | None = None
    parent_sibling_id: str | None = None
    closed_at_us: int | None = None
    base_offset: int = 0
    records: list[StreamRecord] = field(default_factory=list)

    @property
    def is_open(self) -> bool:
        return self.closed_at_us is None

    @property
    def end_offset(self) -> int:
        return self.base_offset + len(self.records)


@dataclass(frozen=True, slots=True)
class ShardView:
    shard_id: str
    parent_id: str | None
    parent_sibling_id: str | None


@dataclass(frozen=True, slots=True)
class StreamDescription:
    stream_id: str
    table_name: str
    creation_time_us: int
    expiration_hours: int
    shards: list[ShardView]
    next_shard_id: str | None


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """One GetStreamRecord answer; `may_more_record` says whether records beyond this page wait already."""

    records: list[StreamRecord]
    next_iterator: str | None
    may_more_record: bool = False


def encode_iterator(stream_id: str, shard_id: str, offset: int) -> str:
    """Deterministic ASCII iterator: the same position always gives the same string."""
    return base64.urlsafe_b64encode(f"{stream_id}\n{shard_id}\n{offset}".encode()).decode("ascii")


def decode_iterator(iterator: str) -> tuple[str, str, int]:
    try:
        stream_id, shard_id, offset = base64.urlsafe_b64decode(iterator.encode("ascii")).decode().split("\n")
        return stream_id, shard_id, int(offset)
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise ParameterInvalid(
            f"Invalid shard iterator {iterator[:80]!r}: get a new one with GetShardIterator."
        ) from exc


class Stream:
    """One enabled stream of one table. Not thread-safe: the server serialises all calls."""

    def __init__(
        self,
        stream_id: str,
        table_name: str,
        creation_time_us: int,
        expiration_hours: int,
        origin_columns: Iterable[str] = (),
    ) -> None:
        validate_expiration_hours(expiration_hours)
        self.stream_id = stream_id
        self.table_name = table_name
        self.creation_time_us = creation_time_us
        self.expiration_hours = expiration_hours
        self.origin_columns = tuple(origin_columns)
        self.shards: dict[str, Shard] = {}
        self._next_shard_number = 0
        self._open: list[Shard] = []
        self._open_starts: list[int] = []
        self._add_shard(0, HASH_SPACE, creation_time_us)

    # -- shards -------------------------------------------------------------------------------------------------

    def _add_shard(
        self, hash_start: int, hash_end: int, now_us: int, parent_id: str | None = None, sibling_id: str | None = None
    ) -> Shard:
        self._next_shard_number += 1
        shard = Shard(f"shard-{self._next_shard_number:06d}", hash_start, hash_end, now_us, parent_id, sibling_id)
        self.shards[shard.shard_id] = shard
        return shard

    def _reindex_open(self) -> None:
        self._open = sorted((s for s in self.shards.values() if s.is_open), key=lambda s: s.hash_start)
        self._open_starts = [s.hash_start for s in self._open]

    def shard(self, shard_id: str) -> Shard:
        shard = self.shards.get(shard_id)
        if shard is None:
            raise ObjectNotExist(f"Shard {shard_id!r} does not exist in stream {self.stream_id!r}.")
        return shard

    def open_shard_for(self, key_hash: int) -> Shard:
        if not self._open:
            self._reindex_open()
        return self._open[bisect.bisect_right(self._open_starts, key_hash) - 1]

    def open_shards(self) -> list[Shard]:
        if not self._open:
            self._reindex_open()
        return list(self._open)

    def split(self, shard_id: str, now_us: int) -> list[str]:
        """Close `shard_id` and open two children covering its halves; returns the children's ids."""
        parent = self.shard(shard_id)
        if not parent.is_open:
            raise ParameterInvalid(f"Shard {shard_id!r} is closed; only an open shard can be split.")
        if parent.hash_end - parent.hash_start < 2:
            raise ParameterInvalid(f"Shard {shard_id!r} covers a single hash value and cannot be split.")
        middle = (parent.hash_start + parent.hash_end) // 2
        parent.closed_at_us = now_us
        left = self._add_shard(parent.hash_start, middle, now_us, parent_id=parent.shard_id)
        right = self._add_shard(middle, parent.hash_end, now_us, parent_id=parent.shard_id)
        self._reindex_open()
        return [left.shard_id, right.shard_id]

    def merge(self, shard_id: str, sibling_id: str, now_us: int) -> str:
        """Close two adjacent open shards and open one child over both ranges; returns the child's id."""
        first, second = self.shard(shard_id), self.shard(sibling_id)
        if shard_id == sibling_id:
            raise ParameterInvalid(f"Cannot merge shard {shard_id!r} with itself.")
        for shard in (first, second):
            if not shard.is_open:
                raise ParameterInvalid(f"Shard {shard.shard_id!r} is closed; only open shards can be merged.")
        if first.hash_end == second.hash_start:
            start, end = first.hash_start, second.hash_end
        elif second.hash_end == first.hash_start:
            start, end = second.hash_start, first.hash_end
        else:
            raise ParameterInvalid(f"Shards {shard_id!r} and {sibling_id!r} are not adjacent and cannot be merged.")
        first.closed_at_us = second.closed_at_us = now_us
        child = self._add_shard(start, end, now_us, parent_id=shard_id, sibling_id=sibling_id)
        self._reindex_open()
        return child.shard_id

    # -- records ------------------------------------------------------------------------------------------------

    def append(self, key_hash: int, record: StreamRecord) -> Shard:
        shard = self.open_shard_for(key_hash)
        shard.records.append(record)
        return shard

    def trim(self, before_us: int) -> int:
        """Drop records committed before `before_us`, and closed shards left empty that closed before it.
        Returns the number of records dropped."""
        dropped = 0
        for shard in list(self.shards.values()):
            count = bisect.bisect_left(shard.records, before_us, key=_record_time)
            if count:
                del shard.records[:count]
                shard.base_offset += count
                dropped += count
            closed_at = shard.closed_at_us
            if closed_at is not None and closed_at < before_us and not shard.records:
                del self.shards[shard.shard_id]
        return dropped

    def expire(self, now_us: int) -> int:
        """Apply the retention period: records older than `expiration_hours` are gone."""
        return self.trim(now_us - self.expiration_hours * _US_PER_HOUR)

    # -- reading ------------------------------------------------------------------------------------------------

    def describe(self, inclusive_start_shard_id: str | None, shard_limit: int | None) -> StreamDescription:
        ids = sorted(self.shards)
        start = 0 if inclusive_start_shard_id is None else bisect.bisect_left(ids, inclusive_start_shard_id)
        if shard_limit is not None and shard_limit <= 0:
            raise ParameterInvalid(f"shard_limit must be positive, got {shard_limit}.")
        stop = len(ids) if shard_limit is None else min(len(ids), start + shard_limit)
        shards = [self.shards[i] for i in ids[start:stop]]
        return StreamDescription(
            stream_id=self.stream_id,
            table_name=self.table_name,
            creation_time_us=self.creation_time_us,
            expiration_hours=self.expiration_hours,
            shards=[ShardView(s.shard_id, s.parent_id, s.parent_sibling_id) for s in shards],
            next_shard_id=ids[stop] if stop < len(ids) else None,
        )

    def iterator(self, shard_id: str, timestamp_us: int | None = None) -> str:
        """Iterator at the oldest retained record, or at the first record committed at or after `timestamp_us`."""
        shard = self.shard(shard_id)
        offset = shard.base_offset
        if timestamp_us is not None:
            offset += bisect.bisect_left(shard.records, timestamp_us, key=_record_time)
        return encode_iterator(self.stream_id, shard_id, offset)

    def read(self, shard_id: str, offset: int, limit: int | None) -> RecordBatch:
        """Records from `offset`; the next iterator is the same string when nothing is new, None once a closed
        shard has been read to its end."""
        if limit is None:
            limit = DEFAULT_RECORD_LIMIT
        if limit <= 0:
            raise ParameterInvalid(f"limit must be positive, got {limit}.")
        limit = min(limit, MAX_RECORD_LIMIT)
        shard = self.shards.get(shard_id)
        if shard is None or offset < shard.base_offset:
            raise TrimmedDataAccess()
        if offset > shard.end_offset:
            raise ParameterInvalid("The shard iterator points past the end of its shard; get a new one.")
        start = offset - shard.base_offset
        records = shard.records[start : start + limit]
        size = 0
        for index, record in enumerate(records):
            size += len(record.payload)
            if size > MAX_RECORD_BYTES and index > 0:
                records = records[:index]
                break
        next_offset = offset + len(records)
        if not shard.is_open and next_offset == shard.end_offset:
            return RecordBatch(records, None)
        more = next_offset < shard.end_offset
        return RecordBatch(records, encode_iterator(self.stream_id, shard_id, next_offset), more)


def validate_expiration_hours(hours: int | None) -> int:
    if hours is None or not 1 <= hours <= MAX_EXPIRATION_HOURS:
        raise ParameterInvalid(
            f"Stream expiration time must be 1 to {MAX_EXPIRATION_HOURS} hours when the stream is enabled, got {hours}."
        )
    return hours
