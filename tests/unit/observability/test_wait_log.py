"""The wait log: a new problem at once, an unchanged one once per interval."""

from __future__ import annotations

import logging

import pytest

from cdcbridge.observability.wait_log import WaitLog


def test_logs_new_problems_at_once_and_repeats_only_after_the_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    wait_log = WaitLog(logging.getLogger("test.wait"), interval=60.0, clock=lambda: now[0])
    assert not wait_log.waited
    with caplog.at_level(logging.WARNING, logger="test.wait"):
        wait_log.waiting("table t is missing", "waiting: %s")
        now[0] = 30.0
        wait_log.waiting("table t is missing", "waiting: %s")  # unchanged, within the interval: quiet
        now[0] = 31.0
        wait_log.waiting("stream of t is off", "waiting: %s")  # changed: at once
        now[0] = 90.0
        wait_log.waiting("stream of t is off", "waiting: %s")  # 59 s later: quiet
        now[0] = 91.0
        wait_log.waiting("stream of t is off", "waiting: %s")  # 60 s later: again
    assert [r.getMessage() for r in caplog.records] == [
        "waiting: table t is missing", "waiting: stream of t is off", "waiting: stream of t is off",
    ]  # fmt: skip
    assert wait_log.waited
