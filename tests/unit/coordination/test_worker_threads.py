"""The threaded `run` loop with real clocks and a thread pool (short timings): hand-off on stop, fencing."""

from __future__ import annotations

import threading
import time

import pytest

from cdcbridge.coordination import (
    CoordinationSettings,
    FakeClock,
    InMemoryLeaseStore,
    WorkerFencedError,
    run_worker,
)
from cdcbridge.coordination.stream.simulator import StreamSimulator
from tests.unit.coordination.helpers import STREAM, Journal, RecordingProcessor

FAST = CoordinationSettings(
    lease_duration_seconds=1.0,
    renew_interval_seconds=0.25,
    take_interval_seconds=0.2,
    shard_sync_interval_seconds=0.3,
    parent_poll_interval_seconds=0.05,
    self_fence_margin_seconds=0.2,
    idle_fetch_interval_seconds=0.02,
    task_retry_backoff_seconds=0.05,
    worker_loop_interval_seconds=0.01,
    handoff_timeout_seconds=1.0,
    no_progress_abort_seconds=1.5,
    max_consumer_threads=4,
    store_retry_backoff_seconds=0.01,
)


def _wait_for(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def _start(store: InMemoryLeaseStore, stream: StreamSimulator, journal: Journal, worker_id: str):  # type: ignore[no-untyped-def]
    stop = threading.Event()
    errors: list[BaseException] = []

    def body_with_stop() -> None:
        try:
            run_worker(
                store=store,
                stream=stream,
                processor_factory=lambda: RecordingProcessor(journal, worker_id),
                settings=FAST,
                worker_id=worker_id,
                stream_id=STREAM,
                stop=stop,
            )
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=body_with_stop, name=f"test-{worker_id}", daemon=True)
    thread.start()
    return thread, stop, errors


def test_two_threaded_workers_share_a_stream_and_hand_over_on_stop() -> None:
    store = InMemoryLeaseStore()
    stream = StreamSimulator(STREAM, shard_count=4)
    journal = Journal(FakeClock())
    for i in range(40):
        stream.put(f"k{i}")
    t1, stop1, err1 = _start(store, stream, journal, "w1")
    t2, stop2, err2 = _start(store, stream, journal, "w2")
    _wait_for(lambda: len({d.sequence for d in journal.deliveries}) == 40)
    _wait_for(
        lambda: (
            sorted(sum(1 for lease in store.list_leases(STREAM) if lease.owner == w) for w in ("w1", "w2")) == [2, 2]
        )
    )

    stop1.set()
    t1.join(timeout=10)
    assert not t1.is_alive() and err1 == []
    _wait_for(lambda: all(lease.owner == "w2" for lease in store.list_leases(STREAM)), timeout=5)
    for i in range(20):
        stream.put(f"after{i}")
    _wait_for(lambda: len({d.sequence for d in journal.deliveries}) == 60)
    stop2.set()
    t2.join(timeout=10)
    assert not t2.is_alive() and err2 == []
    assert all(lease.owner == "" for lease in store.list_leases(STREAM))  # released on stop
    assert len(journal.deliveries) == 60  # hand-offs checkpointed: nothing delivered twice


def test_threaded_worker_is_fenced_when_the_store_stops_answering() -> None:
    store = InMemoryLeaseStore()
    stream = StreamSimulator(STREAM, shard_count=2)
    journal = Journal(FakeClock())
    thread, stop, errors = _start(store, stream, journal, "w1")
    _wait_for(lambda: sum(1 for lease in store.list_leases(STREAM) if lease.owner == "w1") == 2)
    store.set_unavailable(True)
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], WorkerFencedError)
    assert {reason for _, _, reason in journal.shutdowns} == {"LEASE_LOST"}
    stop.set()


def test_settings_reject_a_renewal_interval_that_cannot_keep_a_lease() -> None:
    with pytest.raises(ValueError, match="renew_interval_seconds"):
        CoordinationSettings(lease_duration_seconds=5, renew_interval_seconds=4.5)
    with pytest.raises(ValueError, match="extra"):
        CoordinationSettings(lease_secs=3)  # type: ignore[call-arg]
    defaults = CoordinationSettings()
    assert (defaults.lease_duration_seconds, defaults.renew_interval_seconds, defaults.take_interval_seconds) == (
        20.0,
        6.0,
        6.0,
    )
    assert (defaults.shard_sync_interval_seconds, defaults.parent_poll_interval_seconds, defaults.max_records) == (
        10.0,
        5.0,
        1000,
    )
    assert (defaults.no_progress_abort_seconds, defaults.handoff_timeout_seconds, defaults.steals_per_cycle) == (
        60.0,
        30.0,
        1,
    )
