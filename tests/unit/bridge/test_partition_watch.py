"""A topic whose partition count changes while the bridge runs stops the worker, naming the topic and the fix."""

from __future__ import annotations

import threading

from cdcbridge.bridge.partition_watch import PartitionWatch
from cdcbridge.kafka.errors import BrokerUnreachableError


class _Admin:
    def __init__(self, answers: list[dict[str, int] | Exception]) -> None:
        self.answers = answers
        self.calls = 0

    def partition_counts(self, names: list[str]) -> dict[str, int]:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return {name: answer[name] for name in names if name in answer}


def test_an_unchanged_count_or_an_unreachable_broker_is_no_mismatch() -> None:
    admin = _Admin([{"cdc.t.mutation": 6}, BrokerUnreachableError("no broker answered")])
    watch = PartitionWatch(admin, {"cdc.t.mutation": 6}, threading.Event(), 60)
    assert watch.check_once() is None
    assert watch.check_once() is None


def test_a_changed_count_stops_the_bridge_with_the_topic_named() -> None:
    stop = threading.Event()
    admin = _Admin([{"cdc.t.mutation": 6, "cdc.t.image": 6}, {"cdc.t.mutation": 6, "cdc.t.image": 8}])
    watch = PartitionWatch(admin, {"cdc.t.mutation": 6, "cdc.t.image": 6}, stop, 0.01).start()
    assert stop.wait(10), "the watch stops the bridge"
    watch.stop()
    assert watch.failure is not None
    message = str(watch.failure)
    assert "topic cdc.t.image now has 8 partitions but had 6" in message
    assert "Restore the topic with 6 partitions" in message and "configure a new topic name" in message
