"""The threaded `run` loop goes on as soon as a shard task ends or a stop is requested, not on its timer.

The loop interval here is far longer than the test may take: the records are only delivered, and the worker only
stops, if task completions and `request_stop` wake the loop.
"""

from __future__ import annotations

import threading
import time

from cdcbridge.coordination import FakeClock, InMemoryLeaseStore, Worker
from cdcbridge.coordination.stream.simulator import StreamSimulator
from cdcbridge.coordination.worker import WorkerState
from tests.unit.coordination.helpers import STREAM, Journal, RecordingProcessor
from tests.unit.coordination.test_worker_threads import FAST

RECORDS = 8
#: Longer than the whole test's patience: a pass started by the timer would never come in time.
SLOW_LOOP = FAST.model_copy(update={"worker_loop_interval_seconds": 600.0, "max_records": 1})


def _wait_for(condition, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_each_finished_task_wakes_the_loop_and_a_stop_request_ends_it_at_once() -> None:
    store = InMemoryLeaseStore()
    stream = StreamSimulator(STREAM, shard_count=1)
    for i in range(RECORDS):
        stream.put(f"k{i}", i)
    journal = Journal(FakeClock())
    worker = Worker(
        worker_id="w1",
        stream_id=STREAM,
        store=store,
        stream=stream,
        processor_factory=lambda: RecordingProcessor(journal, "w1"),
        settings=SLOW_LOOP,
    )
    thread = threading.Thread(target=worker.run, name="test-wakeup", daemon=True)
    thread.start()
    try:
        # One record per fetch: RECORDS + 1 tasks in a row, each started only because the previous one woke the loop.
        assert _wait_for(lambda: len(journal.deliveries) == RECORDS), (
            f"only {len(journal.deliveries)} of {RECORDS} records delivered: the loop waited for its timer"
        )
        assert [d.key for d in journal.deliveries] == [f"k{i}" for i in range(RECORDS)]
    finally:
        worker.request_stop()
    thread.join(timeout=20.0)
    assert not thread.is_alive(), "request_stop did not wake the loop: the worker kept waiting for its timer"
    assert worker.state is WorkerState.STOPPED
    lease = store.list_leases(STREAM)[0]
    assert not lease.owner, "the drained lease is released on stop"
    assert lease.checkpoint == f"s0@{RECORDS}", "the drain checkpointed every delivered record"
