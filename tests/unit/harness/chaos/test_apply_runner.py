"""The background apply job of a chaos run: restarted after failures, stopped only when idle (no Spark)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from cdcbridge.harness.chaos import apply_runner
from cdcbridge.harness.chaos.apply_runner import BackgroundApply


@dataclass
class FakeStreams:
    """`spark.streams.active`: one query whose status the test controls."""

    busy: threading.Event = field(default_factory=threading.Event)

    @property
    def active(self) -> list[Any]:
        status = {"isTriggerActive": self.busy.is_set(), "isDataAvailable": False, "message": ""}
        return [SimpleNamespace(status=status)]


class FakeJob:
    """run_apply: fails once, then runs until stopped and reports 3 duplicates and 1 stale operation."""

    def __init__(self) -> None:
        self.calls = 0
        self.running = threading.Event()

    def __call__(self, config: Any, *, stop_event: threading.Event, spark: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the streaming query failed: broker away\nstack trace")
        self.running.set()
        stop_event.wait()
        return SimpleNamespace(report=SimpleNamespace(stats=SimpleNamespace(duplicates=3, stale=1)))


def test_a_failed_run_is_restarted_and_the_stop_waits_for_the_running_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    import cdcbridge.apply.job

    job = FakeJob()
    monkeypatch.setattr(cdcbridge.apply.job, "run_apply", job)
    monkeypatch.setattr(apply_runner, "RESTART_DELAY_SECONDS", 0.0)
    streams = FakeStreams()
    runner = BackgroundApply(config=object(), spark=SimpleNamespace(streams=streams)).start()
    assert job.running.wait(10)
    streams.busy.set()  # a micro-batch is running: stop must not interrupt it
    stopper = threading.Thread(target=runner.stop)
    stopper.start()
    stopper.join(0.5)
    assert stopper.is_alive()
    streams.busy.clear()
    stopper.join(10)
    assert not stopper.is_alive()
    stats = runner.stats
    assert stats.runs == 2
    assert stats.failures == ["RuntimeError: the streaming query failed: broker away"]
    assert (stats.duplicates_absorbed, stats.interrupted_by_stop) == (4, 0)
