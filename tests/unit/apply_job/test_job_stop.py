"""A requested stop waits for the running batch, and a batch cut short by that stop is not reported as a failure."""

from __future__ import annotations

import pytest

from cdcbridge.apply.errors import ApplyJobError
from cdcbridge.apply.job import _raise_failure, _stop_between_batches


class FakeQuery:
    """A streaming query whose trigger is active for the first `busy_polls` status reads."""

    def __init__(self, busy_polls: int, exception: Exception | None = None) -> None:
        self.busy_polls = busy_polls
        self.polls = 0
        self.stopped_after_polls: int | None = None
        self.isActive = True
        self._exception = exception

    @property
    def status(self) -> dict:
        self.polls += 1
        return {"isTriggerActive": self.polls <= self.busy_polls}

    def stop(self) -> None:
        self.stopped_after_polls = self.polls
        self.isActive = False

    def exception(self) -> Exception | None:
        return self._exception


class Handler:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error


def test_stop_waits_until_no_trigger_is_active() -> None:
    query = FakeQuery(busy_polls=3)
    _stop_between_batches(query)
    assert query.stopped_after_polls == 4  # three busy reads, then the idle one, then stop


def test_stop_gives_up_waiting_after_the_bound() -> None:
    query = FakeQuery(busy_polls=10**9)
    ticks = iter(range(0, 10**6, 100))
    _stop_between_batches(query, clock=lambda: float(next(ticks)))
    assert query.stopped_after_polls is not None and query.stopped_after_polls < 10


def test_an_interrupted_batch_after_a_requested_stop_is_clean() -> None:
    handler = Handler(RuntimeError("py4j: java.lang.InterruptedException"))
    _raise_failure(FakeQuery(0), handler, stopping=True)  # no exception


def test_an_interruption_without_a_requested_stop_is_a_failure() -> None:
    handler = Handler(RuntimeError("py4j: java.lang.InterruptedException"))
    with pytest.raises(ApplyJobError, match="InterruptedException"):
        _raise_failure(FakeQuery(0), handler, stopping=False)


def test_a_real_batch_error_during_a_stop_is_still_a_failure() -> None:
    handler = Handler(ValueError("column 'age' rejected the value 'x'"))
    with pytest.raises(ApplyJobError, match="rejected"):
        _raise_failure(FakeQuery(0), handler, stopping=True)
