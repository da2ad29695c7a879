"""What an operator sees while a table is exported: a progress bar over the key ranges with the rows exported and
rows/s (click's progress bar, on a terminal), or a log line now and then (not a terminal: no bar noise in logs)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import IO, Any

import click

log = logging.getLogger(__name__)


class ExportRate:
    """Rows exported by this run and rows per second since it started."""

    def __init__(self, rows_before: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rows_before = rows_before
        self._clock = clock
        self._started = clock()

    def describe(self, rows: int) -> str:
        elapsed = max(self._clock() - self._started, 1e-9)
        new_rows = max(rows - self._rows_before, 0)
        return f"{rows:,} rows  {new_rows / elapsed:,.0f} rows/s"

    def rows_per_second(self, rows: int) -> float:
        return max(rows - self._rows_before, 0) / max(self._clock() - self._started, 1e-9)


class ProgressDisplay:
    """Call :meth:`show` often (from one thread); it draws at most every `refresh_seconds` or logs every
    `log_interval_seconds`."""

    def __init__(
        self,
        table: str,
        total_ranges: int,
        ranges_done: int,
        rows_before: int,
        *,
        file: IO[str] | None = None,
        log_interval_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._table = table
        self._total = total_ranges
        self._file = file if file is not None else sys.stderr
        self._rate = ExportRate(rows_before, clock)
        self._clock = clock
        self._log_interval = log_interval_seconds
        self._last_log = clock()
        self._done = ranges_done
        self._bar: Any = None
        if _is_terminal(self._file):
            self._bar = click.progressbar(
                length=total_ranges, label=f"snapshot {table}", file=self._file, show_pos=True, show_eta=False,
                item_show_func=lambda text: text, update_min_steps=0,
            )  # fmt: skip
            self._bar.__enter__()
            self._bar.update(ranges_done, "ranges")

    def show(self, ranges_done: int, rows: int) -> None:
        text = self._rate.describe(rows)
        if self._bar is not None:
            self._bar.update(ranges_done - self._done, f"ranges  {text}")
        elif self._clock() - self._last_log >= self._log_interval:
            self._last_log = self._clock()
            log.info("snapshot of table %s: %d/%d ranges, %s", self._table, ranges_done, self._total, text)
        self._done = ranges_done

    def close(self, rows: int) -> float:
        """Finish the bar; returns this run's rows/s."""
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
        return self._rate.rows_per_second(rows)


def _is_terminal(file: IO[str]) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):
        return False
