"""`bridge.end_time`: replicate the changes committed up to a time, then stop (the seed's "replicate until a time,
then exit"; the Tunnel Service's end time).

The processor produces nothing for, and never checkpoints, a record committed after the end time, so a shard's
checkpoint stops at its last record up to it. A shard has *passed* the end time when, by the status table and the
stream:

- its lease says SHARD_END (every record of it was produced), or
- the first record after its checkpoint was committed after the end time, or
- nothing follows its checkpoint and it is closed, or the clock is past end time + grace (an idle shard: a record
  committed up to the end time would be readable by then).

A worker stops (exit 0) once every listed shard of every table passed, whoever owns them. The per-shard progress
(time reached vs end time) is what `cdcbridge status` shows, like DescribeTunnel's channel progress.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cdcbridge.changes import format_time_us, to_us
from cdcbridge.config import BridgeSettings
from cdcbridge.coordination.checkpoint.positions import SHARD_END, TRIM_HORIZON
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.tablestore.errors import StreamError

log = logging.getLogger(__name__)

#: GetStreamRecord pages read at most, per shard and check, to find the first unconfirmed record.
MAX_PROBE_PAGES = 20


@dataclass(frozen=True)
class ShardEndProgress:
    """Where one shard stands against the end time. Times are commit times in µs (None: unknown or none)."""

    table: str
    shard_id: str
    reached_us: int | None
    next_us: int | None
    finished: bool
    passed: bool
    error: str | None = None

    def describe(self, end_us: int) -> str:
        if self.error is not None:
            return f"unknown ({self.error})"
        if self.finished:
            return "finished"
        reached = "nothing yet" if self.reached_us is None else format_time_us(self.reached_us)
        if self.passed:
            return f"passed end time (reached {reached})"
        behind = "" if self.reached_us is None else f", {max(end_us - self.reached_us, 0) / 1e6:.1f}s to go"
        return f"reached {reached}{behind}"


def has_passed(*, finished: bool, next_us: int | None, closed: bool, end_us: int, now_us: int, grace_us: int) -> bool:
    """The rule of the module docstring, on what was read of one shard."""
    if finished:
        return True
    if next_us is not None:
        return next_us > end_us
    return closed or now_us > end_us + grace_us


def first_unconfirmed(streams: Any, stream_id: str, shard_id: str, lease: Lease | None) -> tuple[int | None, bool]:
    """(commit µs of the first record after the lease's checkpoint or None, whether the shard is read to its end)."""
    checkpoint = lease.checkpoint if lease is not None else TRIM_HORIZON
    confirmed = lease.checkpoint_seq if lease is not None else None
    iterator = checkpoint if checkpoint != TRIM_HORIZON else streams.get_shard_iterator(stream_id, shard_id)
    for _ in range(MAX_PROBE_PAGES):
        page = streams.get_stream_record(iterator, 100)
        for record in page.records:
            if confirmed is None or not confirmed.covers(record.sequence):
                return record.sequence.timestamp_us, False
        if page.next_shard_iterator is None:
            return None, True
        if not page.records or page.next_shard_iterator == iterator:
            return None, False
        iterator = page.next_shard_iterator
    return None, False


def shard_progress(
    streams: Any, table: str, stream_id: str, shard_id: str, lease: Lease | None, *, end_us: int, now_us: int,
    grace_us: int,
) -> ShardEndProgress:  # fmt: skip
    reached = lease.checkpoint_seq.sequence.timestamp_us if lease and lease.checkpoint_seq else None
    if lease is not None and lease.checkpoint == SHARD_END:
        return ShardEndProgress(table, shard_id, reached, None, finished=True, passed=True)
    try:
        next_us, closed = first_unconfirmed(streams, stream_id, shard_id, lease)
    except StreamError as error:
        return ShardEndProgress(table, shard_id, reached, None, False, False, error=str(error))
    passed = has_passed(finished=False, next_us=next_us, closed=closed, end_us=end_us, now_us=now_us,
                        grace_us=grace_us)  # fmt: skip
    return ShardEndProgress(table, shard_id, reached, next_us, finished=False, passed=passed)


def end_time_progress(
    streams: Any, list_leases: Callable[[str], list[Lease]], tables: Sequence[tuple[str, str]], *, end_us: int,
    now_us: int, grace_us: int,
) -> list[ShardEndProgress]:  # fmt: skip
    """Every listed shard of every (table, stream id), against the end time."""
    progress = []
    for table, stream_id in tables:
        leases = {lease.shard_id: lease for lease in list_leases(stream_id)}
        for shard in streams.list_all_shards(stream_id):
            progress.append(shard_progress(streams, table, stream_id, shard.shard_id, leases.get(shard.shard_id),
                                           end_us=end_us, now_us=now_us, grace_us=grace_us))  # fmt: skip
    return progress


class EndTimeWatch:
    """Checks every `interval` seconds whether every shard passed the end time; then sets `stop` (the worker drains,
    checkpoints, releases its leases and exits 0)."""

    def __init__(
        self,
        progress: Callable[[int], list[ShardEndProgress]],
        *,
        end_us: int,
        interval_seconds: float,
        stop: threading.Event,
        now_us: Callable[[], int] = lambda: time.time_ns() // 1000,
    ) -> None:
        self._progress = progress
        self._end_us = end_us
        self._interval = interval_seconds
        self._stop = stop
        self._now_us = now_us
        self.reached_end = threading.Event()

    def check_once(self) -> bool:
        """One check; True (and `stop` set) once every shard passed."""
        try:
            shards = self._progress(self._now_us())
        except Exception as error:  # a check that cannot read the status table or a stream just waits for the next
            log.warning("end time check failed, retrying in %.0fs: %s", self._interval, error)
            return False
        waiting = [shard for shard in shards if not shard.passed]
        if shards and not waiting:
            log.info("every shard (%d) passed the end time %s; stopping", len(shards), format_time_us(self._end_us))
            self.reached_end.set()
            self._stop.set()
            return True
        log.info("end time %s: %d/%d shards passed; waiting for %s", format_time_us(self._end_us),
                 len(shards) - len(waiting), len(shards),
                 ", ".join(f"{s.table}/{s.shard_id} {s.describe(self._end_us)}" for s in waiting[:5]))  # fmt: skip
        return False

    def run(self) -> None:
        while not self._stop.is_set():
            if self.check_once():
                return
            self._stop.wait(self._interval)

    def start(self) -> EndTimeWatch:
        threading.Thread(target=self.run, name="end-time-watch", daemon=True).start()
        return self


def watch_end_time(
    streams: Any, list_leases: Callable[[str], list[Lease]], tables: Sequence[tuple[str, str]],
    settings: BridgeSettings, stop: threading.Event,
) -> EndTimeWatch:  # fmt: skip
    """Start the watch of a worker whose configuration has `bridge.end_time` (`settings` is the bridge section)."""
    end_us = to_us(settings.end_time)
    grace_us = int(settings.end_time_grace_seconds * 1_000_000)

    def progress(now_us: int) -> list[ShardEndProgress]:
        return end_time_progress(streams, list_leases, tables, end_us=end_us, now_us=now_us, grace_us=grace_us)

    log.info("replicating changes up to the end time %s, then stopping", format_time_us(end_us))
    return EndTimeWatch(progress, end_us=end_us, interval_seconds=settings.end_time_check_interval_seconds,
                        stop=stop).start()  # fmt: skip
