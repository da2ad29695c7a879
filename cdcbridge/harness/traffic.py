"""`cdcbridge traffic`: continuous demo changes on a source table (docker compose's `traffic` profile), so a fresh
stack has something to replicate: puts, updates (a column put, another deleted), increments, deletes and batch
writes over a fixed set of keys, at a steady rate; on the emulator, now and then a shard split, so leases move.

The keys follow the table's own primary key (read with DescribeTable), so any table created with
`cdcbridge table create` can be fed. A demonstration tool, not part of the product: it lives in the harness.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cdcbridge.harness.emulator_admin import EmulatorAdmin, EmulatorAdminError
from cdcbridge.tablestore.client import StreamClient

log = logging.getLogger(__name__)

#: How often progress is logged.
PROGRESS_LOG_SECONDS = 30.0


@dataclass
class TrafficCounts:
    """What the writer did so far."""

    writes: Counter[str] = field(default_factory=Counter)
    failed: int = 0
    splits: int = 0

    def line(self) -> str:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.writes.items()))
        return f"{sum(self.writes.values())} writes ({kinds}), {self.failed} failed, {self.splits} shard split(s)"


def key_columns(primary_key: list[tuple[str, str]], rows: int) -> list[list[tuple[str, Any]]]:
    """`rows` distinct primary keys for a table with `primary_key` ((name, SDK type) pairs)."""
    values = {
        "STRING": lambda i: f"k{i:06d}",
        "INTEGER": lambda i: i,
        "BINARY": lambda i: f"k{i:06d}".encode(),
    }
    return [[(name, values[str(kind).upper()](i)) for name, kind in primary_key] for i in range(rows)]


class TrafficWriter:
    """Writes about `rate` operations/s to `table` until `stop` is set or `operations` were written; with
    `split_every` seconds (and an emulator at `admin`), splits a leaf shard of the stream at that pace, up to
    `max_shards` open shards."""

    def __init__(self, streams: StreamClient, table: str, *, rows: int, rate: float, seed: int,
                 admin: EmulatorAdmin | None = None, split_every: float = 0.0, max_shards: int = 8,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self._streams = streams
        self._ots = streams.ots_client
        self._table = table
        self._rows = rows
        self._interval = 1.0 / rate
        self._random = random.Random(seed)
        self._admin = admin
        self._split_every = split_every
        self._max_shards = max_shards
        self._clock = clock
        self.counts = TrafficCounts()

    def run(self, stop: threading.Event, operations: int | None = None) -> TrafficCounts:
        primary_key = [
            (str(c[0]), str(c[1])) for c in self._ots.describe_table(self._table).table_meta.schema_of_primary_key
        ]
        keys = key_columns(primary_key, self._rows)
        log.info("traffic: writing about %.0f changes/s over %d keys of table %s", 1 / self._interval, len(keys),
                 self._table)  # fmt: skip
        now = self._clock()
        next_write, next_split, next_log = now, now + self._split_every, now + PROGRESS_LOG_SECONDS
        while not stop.is_set() and (operations is None or sum(self.counts.writes.values()) < operations):
            self._write(keys)
            now = self._clock()
            if self._split_every > 0 and self._admin is not None and now >= next_split:
                self._split()
                next_split = now + self._split_every
            if now >= next_log:
                log.info("traffic: %s", self.counts.line())
                next_log = now + PROGRESS_LOG_SECONDS
            next_write = max(next_write + self._interval, now - 1.0)  # no burst after a slow spell
            stop.wait(max(0.0, next_write - self._clock()))
        log.info("traffic stopped: %s", self.counts.line())
        return self.counts

    def _write(self, keys: list[list[tuple[str, Any]]]) -> None:
        from tablestore import BatchWriteRowRequest, Condition, PutRowItem, Row, RowExistenceExpectation
        from tablestore import TableInBatchWriteRowItem as BatchItem

        rng, ots, table = self._random, self._ots, self._table
        ignore = Condition(RowExistenceExpectation.IGNORE)
        key = rng.choice(keys)
        choice = rng.random()
        try:
            if choice < 0.30:
                columns = [("owner", f"user-{rng.randrange(1000)}"), ("balance", rng.randrange(1000)),
                           ("score", rng.random() * 100), ("vip", rng.random() < 0.2)]  # fmt: skip
                ots.put_row(table, Row(key, columns), ignore)
                kind = "put"
            elif choice < 0.50:
                ots.update_row(table, Row(key, {"put": [("note", f"n{rng.randrange(100)}")], "delete_all": ["score"]}),
                               ignore)  # fmt: skip
                kind = "update"
            elif choice < 0.80:
                ots.update_row(table, Row(key, {"increment": [("balance", rng.randrange(1, 50))]}), ignore)
                kind = "increment"
            elif choice < 0.90:
                ots.delete_row(table, Row(key), ignore)
                kind = "delete"
            else:
                request = BatchWriteRowRequest()
                items = [PutRowItem(Row(k, [("owner", "batch"), ("balance", rng.randrange(100))]), ignore)
                         for k in rng.sample(keys, min(5, len(keys)))]  # fmt: skip
                request.add(BatchItem(table, items))
                ots.batch_write_row(request)
                kind = "batch"
        except Exception as error:  # a refused or lost write: counted and logged, the traffic goes on
            self.counts.failed += 1
            log.warning("traffic: a write to table %s failed: %s", table, error)
            return
        self.counts.writes[kind] += 1

    def _split(self) -> None:
        """Split one leaf shard (a shard no other shard names as a parent: still open)."""
        assert self._admin is not None
        try:
            stream_id = self._streams.describe_table_stream(self._table).stream_id
            if stream_id is None:
                return
            shards = self._streams.list_all_shards(stream_id)
            parents = {parent for shard in shards for parent in shard.parent_ids}
            leaves = [shard.shard_id for shard in shards if shard.shard_id not in parents]
            if len(leaves) >= self._max_shards:
                return
            children = self._admin.split(self._table, self._random.choice(leaves))
        except EmulatorAdminError as error:
            log.warning("traffic: cannot split a shard (%s); splits need the emulator, they stop here", error)
            self._admin = None
            return
        self.counts.splits += 1
        log.info("traffic: split a shard of table %s into %s", self._table, ", ".join(children))
