"""An in-memory change stream with shards, split, merge, trimming and shard expiry, for coordination tests.

Rows map to shards by a hash of the key, so each key lives in exactly one open shard and moves to exactly one child
on a split or merge: per-key order across shards is then well defined and checkable (T4, T5). Iterators are
deterministic strings, so a caught-up open shard returns the same iterator again, as Tablestore does.
"""

from __future__ import annotations

import itertools
import threading
import zlib
from dataclasses import dataclass, field

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.coordination.errors import InvalidPositionError, ShardNotFoundError, StreamError, TrimmedDataError
from cdcbridge.coordination.stream.access import RecordBatch, ShardInfo

_HASH_SPACE = 1 << 32


@dataclass
class _Shard:
    info: ShardInfo
    low: int
    high: int  # exclusive
    records: list[ChangeRecord] = field(default_factory=list)
    closed: bool = False
    trimmed: int = 0  # records [0, trimmed) are gone
    removed: bool = False

    def covers(self, point: int) -> bool:
        return self.low <= point < self.high


def key_hash(key: str) -> int:
    return zlib.crc32(key.encode()) % _HASH_SPACE


class StreamSimulator:
    """One table's stream (`stream_id`), implementing ShardLister and RecordFetcher."""

    def __init__(self, stream_id: str = "stream-1", table: str = "orders", shard_count: int = 1) -> None:
        """`shard_count` open shards split the key space evenly (ids s0, s1, ...), like a partitioned table."""
        if shard_count < 1:
            raise ValueError("a stream has at least one shard")
        self.stream_id = stream_id
        self.table = table
        self._lock = threading.RLock()
        self._shards: dict[str, _Shard] = {}
        self._order: list[str] = []
        width = _HASH_SPACE // shard_count
        for number in range(shard_count):
            high = _HASH_SPACE if number == shard_count - 1 else (number + 1) * width
            self._add(ShardInfo(f"s{number}"), number * width, high)
        self._written = 0
        self._next_shard_number = shard_count
        #: Every record ever written, in commit order (ground truth for tests).
        self.history: list[ChangeRecord] = []

    # ----- writing and resharding -----------------------------------------------------------------------------

    def put(self, key: str, value: int | str | None = None) -> ChangeRecord:
        """Commit a PUT of row `key` (column `v`); returns the record as the stream will return it."""
        with self._lock:
            point = key_hash(key)
            shard = next(s for s in self._open_shards() if s.covers(point))
            self._written += 1
            record = ChangeRecord(
                table=self.table,
                action=RecordAction.PUT,
                primary_key=[("pk", key)],
                cells=[Cell("v", CellOp.PUT, self._written if value is None else value)],
                sequence=Sequence(1, 1_700_000_000_000_000 + self._written, 0),
                shard_id=shard.info.shard_id,
            )
            shard.records.append(record)
            self.history.append(record)
            return record

    def split(self, shard_id: str) -> tuple[str, str]:
        """Close an open shard and open two children covering its halves."""
        with self._lock:
            parent = self._open(shard_id)
            middle = (parent.low + parent.high) // 2
            if middle in (parent.low, parent.high):
                raise ValueError(f"shard {shard_id} is too narrow to split")
            parent.closed = True
            left = self._add(ShardInfo(self._new_id(), shard_id), parent.low, middle)
            right = self._add(ShardInfo(self._new_id(), shard_id), middle, parent.high)
            return left, right

    def merge(self, shard_id: str, sibling_id: str) -> str:
        """Close two adjacent open shards and open one child whose parents are both."""
        with self._lock:
            first, second = self._open(shard_id), self._open(sibling_id)
            if first.high != second.low and second.high != first.low:
                raise ValueError(f"shards {shard_id} and {sibling_id} are not adjacent")
            first.closed = second.closed = True
            low, high = min(first.low, second.low), max(first.high, second.high)
            return self._add(ShardInfo(self._new_id(), shard_id, sibling_id), low, high)

    def trim(self, keep_last: int) -> None:
        """Expire all but the newest `keep_last` records of the stream (retention passing)."""
        with self._lock:
            cutoff = self._written - keep_last
            for shard in self._shards.values():
                while shard.trimmed < len(shard.records) and self._number(shard.records[shard.trimmed]) <= cutoff:
                    shard.trimmed += 1

    def remove_shard(self, shard_id: str) -> None:
        """Make a closed shard vanish entirely (all of its data expired)."""
        with self._lock:
            shard = self._shards[shard_id]
            if not shard.closed:
                raise ValueError(f"shard {shard_id} is open; only closed shards expire")
            shard.removed = True
            shard.trimmed = len(shard.records)

    # ----- inspection -----------------------------------------------------------------------------------------

    def open_shard_ids(self) -> list[str]:
        with self._lock:
            return [s.info.shard_id for s in self._open_shards()]

    def adjacent_open_pairs(self) -> list[tuple[str, str]]:
        """Pairs of open shards whose key ranges touch (what `merge` accepts)."""
        with self._lock:
            ordered = sorted(self._open_shards(), key=lambda s: s.low)
            return [(a.info.shard_id, b.info.shard_id) for a, b in itertools.pairwise(ordered)]

    def shard_ids(self) -> list[str]:
        """Listed (not removed) shards, oldest first."""
        with self._lock:
            return [sid for sid in self._order if not self._shards[sid].removed]

    def records_of(self, shard_id: str) -> list[ChangeRecord]:
        with self._lock:
            return list(self._shards[shard_id].records)

    def retained_records_of(self, shard_id: str) -> list[ChangeRecord]:
        with self._lock:
            shard = self._shards[shard_id]
            return list(shard.records[shard.trimmed :])

    def parents_of(self, shard_id: str) -> tuple[str, ...]:
        with self._lock:
            return self._shards[shard_id].info.parent_ids

    # ----- ShardLister / RecordFetcher --------------------------------------------------------------------------

    def list_shards(self, stream_id: str) -> list[ShardInfo]:
        self._check_stream(stream_id)
        with self._lock:
            return [self._shards[sid].info for sid in self._order if not self._shards[sid].removed]

    def get_shard_iterator(self, stream_id: str, shard_id: str) -> str:
        self._check_stream(stream_id)
        with self._lock:
            shard = self._shards.get(shard_id)
            if shard is None or shard.removed:
                raise ShardNotFoundError(f"shard {shard_id!r} of stream {stream_id!r} does not exist")
            return f"{shard_id}@{shard.trimmed}"

    def get_records(self, iterator: str, limit: int) -> RecordBatch:
        with self._lock:
            shard_id, _, position_text = iterator.rpartition("@")
            shard = self._shards.get(shard_id)
            if shard is None or not position_text.isdigit():
                raise InvalidPositionError(f"iterator {iterator!r} is not one of this simulator's")
            position = int(position_text)
            if shard.removed or position < shard.trimmed:
                raise TrimmedDataError(f"iterator {iterator!r}: requested stream data is already trimmed")
            end = min(position + limit, len(shard.records))
            records = list(shard.records[position:end])
            if shard.closed and end == len(shard.records):
                return RecordBatch(records, None)
            return RecordBatch(records, f"{shard_id}@{end}")

    # ----- internals --------------------------------------------------------------------------------------------

    def _check_stream(self, stream_id: str) -> None:
        if stream_id != self.stream_id:
            raise StreamError(f"unknown stream {stream_id!r} (the simulator serves {self.stream_id!r})")

    def _open_shards(self) -> list[_Shard]:
        return [s for s in self._shards.values() if not s.closed]

    def _open(self, shard_id: str) -> _Shard:
        shard = self._shards.get(shard_id)
        if shard is None or shard.closed:
            raise ValueError(f"shard {shard_id} is not an open shard")
        return shard

    def _add(self, info: ShardInfo, low: int, high: int) -> str:
        self._shards[info.shard_id] = _Shard(info, low, high)
        self._order.append(info.shard_id)
        return info.shard_id

    def _new_id(self) -> str:
        shard_id = f"s{self._next_shard_number}"
        self._next_shard_number += 1
        return shard_id

    @staticmethod
    def _number(record: ChangeRecord) -> int:
        return record.sequence.timestamp_us - 1_700_000_000_000_000
