"""The retention watch: levels by share of the expiration, logs on crossing and rate limited, never per poll."""

from __future__ import annotations

import logging

import pytest

from cdcbridge.observability.retention import RetentionLevel, RetentionThresholds, RetentionWatch

HOUR = 3600.0
EXPIRATION = 24 * HOUR


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("ratio", "level"),
    [(0.0, RetentionLevel.OK), (0.49, RetentionLevel.OK), (0.5, RetentionLevel.WARNING), (0.79, RetentionLevel.WARNING),
     (0.8, RetentionLevel.ERROR), (1.5, RetentionLevel.ERROR)],
)  # fmt: skip
def test_levels_follow_the_default_shares(ratio: float, level: RetentionLevel) -> None:
    assert RetentionThresholds().level(ratio) is level


def test_a_level_is_left_only_clearly_below_its_threshold() -> None:
    thresholds = RetentionThresholds(0.5, 0.8)
    assert thresholds.level(0.47, RetentionLevel.WARNING) is RetentionLevel.WARNING
    assert thresholds.level(0.44, RetentionLevel.WARNING) is RetentionLevel.OK
    assert thresholds.level(0.75, RetentionLevel.ERROR) is RetentionLevel.ERROR
    assert thresholds.level(0.70, RetentionLevel.ERROR) is RetentionLevel.WARNING


@pytest.mark.parametrize(("warning", "error"), [(0.8, 0.5), (0.5, 0.5), (0.0, 0.8)])
def test_thresholds_refuse_a_warning_not_below_the_error(warning: float, error: float) -> None:
    with pytest.raises(ValueError, match="retention shares"):
        RetentionThresholds(warning, error)


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "cdcbridge.observability.retention"]


def test_crossings_are_logged_once_each_with_shard_owner_and_advice(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    watch = RetentionWatch(RetentionThresholds(), repeat_seconds=600, clock=clock)
    for hours in (1, 2, 13, 13.5, 14, 20, 20.5, 21):  # polled every 2 s: below, warning x3, error x3
        clock.now += 2
        watch.observe("orders", "s0", "w1", hours * HOUR, EXPIRATION)
    records = _records(caplog)
    assert [r.levelno for r in records] == [logging.WARNING, logging.ERROR]
    message = records[1].getMessage()
    assert "table orders shard s0 (owner w1)" in message
    assert "83.3% of the stream's 24.0 h expiration (ERROR threshold 80%)" in message
    assert "add bridge workers" in message and "Kafka" in message and "expiration" in message
    assert watch.level_of("orders", "s0") is RetentionLevel.ERROR


def test_a_shard_past_a_threshold_is_reminded_every_repeat_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    watch = RetentionWatch(RetentionThresholds(), repeat_seconds=600, clock=clock)
    for _ in range(1000):  # 2000 s at 13 h: one warning, then one per 600 s
        clock.now += 2
        watch.observe("orders", "s0", "w1", 13 * HOUR, EXPIRATION)
    assert [r.levelno for r in _records(caplog)] == [logging.WARNING] * 4


def test_recovery_is_logged_once_at_info_and_forget_resets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    watch = RetentionWatch(RetentionThresholds(), clock=clock)
    watch.observe("orders", "s0", "w1", 13 * HOUR, EXPIRATION)
    watch.observe("orders", "s0", "w1", 0.0, EXPIRATION)
    watch.observe("orders", "s0", "w1", 0.0, EXPIRATION)
    assert [r.levelno for r in _records(caplog)] == [logging.WARNING, logging.INFO]
    watch.observe("orders", "s0", "w1", 13 * HOUR, EXPIRATION)
    watch.forget("orders", "s0")
    assert watch.level_of("orders", "s0") is RetentionLevel.OK


def test_observe_returns_the_share_used() -> None:
    watch = RetentionWatch(RetentionThresholds())
    assert watch.observe("orders", "s0", "w1", 6 * HOUR, EXPIRATION) == pytest.approx(0.25)
