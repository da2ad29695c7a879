"""The export's progress: a bar with ranges, rows and rows/s on a terminal; log lines (not a bar) otherwise."""

from __future__ import annotations

import io
import logging

import pytest

from cdcbridge.snapshot.progress_display import ExportRate, ProgressDisplay


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_counts_only_rows_of_this_run() -> None:
    clock = Clock()
    rate = ExportRate(rows_before=1_000, clock=clock)
    clock.now += 2
    assert rate.describe(5_000) == "5,000 rows  2,000 rows/s"
    assert rate.rows_per_second(5_000) == 2_000


def test_a_terminal_gets_a_bar_with_rows_per_second() -> None:
    clock, terminal = Clock(), Terminal()
    display = ProgressDisplay("orders", 4, 1, 0, file=terminal, clock=clock)
    clock.now += 4
    display.show(3, 12_000)
    display.close(12_000)
    drawn = terminal.getvalue()
    assert "snapshot orders" in drawn and "3/4" in drawn and "12,000 rows  3,000 rows/s" in drawn


def test_a_log_gets_a_line_now_and_then_instead(caplog: pytest.LogCaptureFixture) -> None:
    clock, output = Clock(), io.StringIO()
    display = ProgressDisplay("orders", 4, 0, 0, file=output, log_interval_seconds=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="cdcbridge.snapshot.progress_display"):
        display.show(1, 100)  # too soon for a line
        clock.now += 10
        display.show(2, 2_000)
    assert output.getvalue() == ""
    assert [r.getMessage() for r in caplog.records] == ["snapshot of table orders: 2/4 ranges, 2,000 rows  200 rows/s"]
