"""Retention watch: warn before the stream's expiration trims records a shard has not read yet.

The age of a shard's oldest unread record is known without any extra request: the worker already keeps the
sequences of the records it handed out and not yet checkpointed, and every sequence carries its commit time (µs).
So the age is now minus the commit time of the first unconfirmed record; with nothing unconfirmed it is now minus
the commit time of the last checkpointed record (an upper bound: the next unread record is newer), and 0 once a read
found nothing newer. Against the stream's expiration (DescribeStream, read once at start) that gives the share of
retention used. This module turns that share into a level and into log lines that are written when a shard crosses
a threshold (and repeated at most every `repeat_seconds` while it stays past one), never on every poll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

log = logging.getLogger(__name__)

#: A shard drops back a level only below this share of the threshold, so a ratio hovering at it logs once.
HYSTERESIS = 0.9

ADVICE = (
    "add bridge workers if the running ones are busy (`cdcbridge status` shows leases per worker), check the "
    "Kafka brokers and the schema registry if the shard is stalled (produce errors, unacknowledged messages), or "
    "raise the stream's expiration (up to 168 h)"
)


class RetentionLevel(IntEnum):
    OK = 0
    WARNING = logging.WARNING
    ERROR = logging.ERROR


@dataclass(frozen=True)
class RetentionThresholds:
    warning_share: float = 0.5
    error_share: float = 0.8

    def __post_init__(self) -> None:
        if not 0 < self.warning_share < self.error_share:
            raise ValueError(
                f"retention shares must satisfy 0 < warning ({self.warning_share}) < error ({self.error_share})"
            )

    def level(self, ratio: float, current: RetentionLevel = RetentionLevel.OK) -> RetentionLevel:
        """The level of `ratio`; from `current` a shard moves down only once clearly below its threshold."""
        if ratio >= self.error_share:
            return RetentionLevel.ERROR
        if current is RetentionLevel.ERROR and ratio >= self.error_share * HYSTERESIS:
            return RetentionLevel.ERROR
        if ratio >= self.warning_share:
            return RetentionLevel.WARNING
        if current >= RetentionLevel.WARNING and ratio >= self.warning_share * HYSTERESIS:
            return RetentionLevel.WARNING
        return RetentionLevel.OK


@dataclass
class _ShardWatch:
    level: RetentionLevel
    logged_at: float


class RetentionWatch:
    """Logs each shard's retention level changes, rate limited; thread-safe. `clock`: monotonic seconds."""

    def __init__(
        self,
        thresholds: RetentionThresholds,
        repeat_seconds: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._thresholds = thresholds
        self._repeat_seconds = repeat_seconds
        self._clock = clock
        self._shards: dict[tuple[str, str], _ShardWatch] = {}
        self._lock = threading.Lock()

    def observe(self, table: str, shard: str, owner: str, age_seconds: float, expiration_seconds: float) -> float:
        """Record one reading of the shard; logs when its level changes or, past a threshold, is due for a repeat.
        Returns the share of retention used."""
        ratio = max(0.0, age_seconds) / expiration_seconds
        now = self._clock()
        with self._lock:
            watch = self._shards.get((table, shard))
            previous = watch.level if watch is not None else RetentionLevel.OK
            level = self._thresholds.level(ratio, previous)
            due = watch is not None and now - watch.logged_at >= self._repeat_seconds
            crossed = level is not previous
            repeat = level is not RetentionLevel.OK and due
            logged_at = now if crossed or repeat or watch is None else watch.logged_at
            self._shards[(table, shard)] = _ShardWatch(level, logged_at)
        if crossed or repeat:
            self._log(level, table, shard, owner, age_seconds, expiration_seconds, ratio)
        return ratio

    def forget(self, table: str, shard: str) -> None:
        """The shard is no longer this worker's: its next owner watches it."""
        with self._lock:
            self._shards.pop((table, shard), None)

    def level_of(self, table: str, shard: str) -> RetentionLevel:
        with self._lock:
            watch = self._shards.get((table, shard))
            return watch.level if watch is not None else RetentionLevel.OK

    def _log(
        self, level: RetentionLevel, table: str, shard: str, owner: str,
        age_seconds: float, expiration_seconds: float, ratio: float,
    ) -> None:  # fmt: skip
        where = f"table {table} shard {shard} (owner {owner})"
        if level is RetentionLevel.OK:
            log.info("%s: its oldest unread record is %s old again, %.1f%% of the stream's %s expiration",
                     where, _duration(age_seconds), ratio * 100, _duration(expiration_seconds))  # fmt: skip
            return
        log.log(
            level,
            "%s: its oldest unread record is %s old, %.1f%% of the stream's %s expiration (%s threshold %g%%); "
            "at 100%% unread records are trimmed and lost. What to do: %s",
            where, _duration(age_seconds), ratio * 100, _duration(expiration_seconds), level.name,
            (self._thresholds.error_share if level is RetentionLevel.ERROR else self._thresholds.warning_share) * 100,
            ADVICE,
        )  # fmt: skip


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"
