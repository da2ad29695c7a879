"""apply.wait_for_topics: the job waits for its topics (a bridge worker creates them), logging once a minute and when
what is missing changes; a broker that does not answer yet counts as missing; a stop ends the wait."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pytest

from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.topic_wait import wait_for_topics
from cdcbridge.config import parse_config
from cdcbridge.kafka.errors import BrokerUnreachableError


def _routing(**apply: object) -> TopicRouting:
    config = parse_config(
        {"source": {"tables": [{"name": "accounts"}, {"name": "orders"}]}, "kafka": {"topic_prefix": "cdc"},
         "apply": apply},
        environ={},
    )  # fmt: skip
    return TopicRouting.from_config(config)


class Broker:
    """Answers which topics exist from a script of states: "down", or a set of existing topics (last repeats)."""

    def __init__(self, *states: object) -> None:
        self.states = list(states)
        self.calls = 0

    def existing(self, names: Iterable[str]) -> list[str]:
        state = self.states[min(self.calls, len(self.states) - 1)]
        self.calls += 1
        if state == "down":
            raise BrokerUnreachableError("no Kafka broker answered at kafka:19092")
        return [name for name in names if name in state]  # type: ignore[operator]


class FakeStop:
    def __init__(self, clock: list[float], stop_after: int | None = None) -> None:
        self.clock, self.stop_after, self.waits = clock, stop_after, 0

    def wait(self, seconds: float) -> bool:
        self.waits += 1
        self.clock[0] += seconds
        return self.stop_after is not None and self.waits >= self.stop_after


def test_waits_through_a_down_broker_and_missing_topics(caplog: pytest.LogCaptureFixture) -> None:
    both = {"cdc.accounts.mutation", "cdc.orders.mutation"}
    broker = Broker(*(["down"] * 2 + [set()] * 20 + [{"cdc.accounts.mutation"}] + [both]))
    clock = [0.0]
    stop = FakeStop(clock)
    with caplog.at_level(logging.INFO, logger="cdcbridge.apply.topic_wait"):
        assert wait_for_topics(_routing(), broker.existing, stop, clock=lambda: clock[0], poll_seconds=5.0)  # type: ignore[arg-type]
    assert stop.waits == 23
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # 0 s broker down; 10 s both missing; 70 s still both missing (a minute on); 110 s only orders missing.
    assert len(warnings) == 4
    assert "no Kafka broker answered" in warnings[0]
    assert "cdc.accounts.mutation, cdc.orders.mutation do not exist yet" in warnings[1]
    assert warnings[2] == warnings[1]
    assert "topic(s) cdc.orders.mutation do not exist yet" in warnings[3]
    assert "`cdcbridge run`" in warnings[3]
    assert caplog.records[-1].getMessage() == "the apply job's topics exist; starting"


def test_present_topics_start_at_once_and_a_pattern_never_waits() -> None:
    clock = [0.0]
    stop = FakeStop(clock)
    broker = Broker({"cdc.accounts.mutation", "cdc.orders.mutation"})
    assert wait_for_topics(_routing(), broker.existing, stop)  # type: ignore[arg-type]
    # Spark's subscribePattern picks topics up as they appear: nothing to wait for.
    assert wait_for_topics(_routing(topic_pattern="cdc\\..*"), Broker(set()).existing, stop)  # type: ignore[arg-type]
    assert stop.waits == 0


def test_a_stop_ends_the_wait() -> None:
    clock = [0.0]
    stop = FakeStop(clock, stop_after=2)
    assert not wait_for_topics(_routing(), Broker(set()).existing, stop, clock=lambda: clock[0])  # type: ignore[arg-type]
    assert stop.waits == 2
