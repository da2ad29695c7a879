"""Worker processes started at the same moment (T2 and T12 across processes): concurrent shard syncs create each
lease row exactly once, racing takers never both read a shard, and every record arrives exactly once."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from cdcbridge.harness.bench.failover import wait_until
from cdcbridge.harness.recording_worker import WorkerOptions
from tests.integration.coordination.checks import (
    SLOW,
    assert_first_deliveries_in_key_order,
    assert_one_reader_at_a_time,
    drain_load,
    duplicates,
    stop_all,
)
from tests.integration.coordination.conftest import Scenario

pytestmark = pytest.mark.timeout(240)


def test_workers_started_together_create_and_take_each_lease_once(scenario: Callable[[int], Scenario]) -> None:
    s = scenario(4)  # root → 2 → 4: seven lease rows, four of them active
    cluster = s.cluster
    load = s.start_load()
    together = WorkerOptions(start_at=time.time() + 4)  # after every process has imported and connected
    for worker in ("a", "b", "c"):
        cluster.start_worker(worker, together)
    wait_until(
        lambda: sorted(cluster.counts().values()) == [1, 1, 2] and len(cluster.leases()) == 7,
        SLOW, "four active leases spread 2/1/1",
    )  # fmt: skip
    journal = drain_load(cluster, load.stop())
    stop_all(cluster)

    created = sum(cluster.latest_stats(worker).get("leases_created", 0) for worker in cluster.workers)
    assert created == 7, f"{created} lease rows created for 7 shards: a concurrent sync overwrote a row"
    assert all(lease.counter > 0 for lease in cluster.leases())
    assert_one_reader_at_a_time(journal)
    assert_first_deliveries_in_key_order(journal)
    assert duplicates(journal.deliveries) == {}
    started = sorted(e.at for e in journal.events if e.kind == "worker_started")
    lost = sum(w.log_path.read_text().count("lost the race to take lease") for w in cluster.workers.values())
    print(f"workers started within {started[-1] - started[0]:.3f} s; lost take races: {lost}")
