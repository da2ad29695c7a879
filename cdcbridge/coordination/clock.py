"""Clocks injected into every lease timer.

Lease expiry and self-fencing compare *monotonic* readings only (leases.md I5/I6, T9): a wall-clock step
(NTP, operator) must never fake an expiry. The wall clock is used for log lines alone.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Time source for the coordination layer."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; the only time used for lease decisions."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch, for logs and status output only."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread (retry back-off, idle loops)."""
        ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Sleep until `event` is set or `seconds` pass; returns whether the event is set."""
        ...


class SystemClock:
    """The real clocks: time.monotonic for decisions, time.time for logs."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(seconds, 0.0))


class FakeClock:
    """A clock that moves only when told, so lease tests run in simulated time without sleeping.

    `sleep` and `wait` advance the clock instead of blocking; `jump_wall` steps the wall clock alone (T9).
    """

    def __init__(self, start: float = 1_000.0, wall_start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._now = start
        self._wall_offset = wall_start - start

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def wall(self) -> float:
        with self._lock:
            return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        """Move both clocks forward."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back (advance({seconds}))")
        with self._lock:
            self._now += seconds

    def jump_wall(self, seconds: float) -> None:
        """Step the wall clock by `seconds` (either sign) without touching the monotonic clock."""
        with self._lock:
            self._wall_offset += seconds

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.sleep(seconds)
        return event.is_set()
