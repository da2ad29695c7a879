"""A rows-per-second budget for reading the source table, so an incremental snapshot does not starve the table's
reserved read throughput (a token bucket that may go into debt: a chunk is read whole, the next one waits)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RowRateLimiter:
    """`spend(rows)` after each read; `wait()` before the next one blocks until the budget is back above zero.

    None (or 0) rows per second means unlimited. The bucket holds at most one second of budget, so a pause does not
    allow a burst later.
    """

    def __init__(
        self,
        rows_per_second: float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        self._rate = rows_per_second or None
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self._rate or 0)
        self._last = clock()

    @property
    def rows_per_second(self) -> float | None:
        return self._rate

    def set_rate(self, rows_per_second: float | None) -> None:
        """Change the rate (the snapshot row's rows_per_second was edited)."""
        self._refill()
        self._rate = rows_per_second or None
        if self._rate is not None:
            self._tokens = min(self._tokens, self._rate)

    def spend(self, rows: int) -> None:
        if self._rate is not None:
            self._refill()
            self._tokens -= rows

    def delay(self) -> float:
        """Seconds to wait before the next read may start (0 when unlimited or in budget)."""
        if self._rate is None:
            return 0.0
        self._refill()
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate

    def wait(self, stop: threading.Event | None = None) -> bool:
        """Block for :meth:`delay`; False when `stop` was set meanwhile."""
        delay = self.delay()
        if delay <= 0:
            return True
        if self._sleep is not None:
            self._sleep(delay)
            return True
        return not (stop or threading.Event()).wait(delay)

    def _refill(self) -> None:
        now = self._clock()
        if self._rate is not None:
            self._tokens = min(self._rate, self._tokens + (now - self._last) * self._rate)
        self._last = now
