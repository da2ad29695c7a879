"""An empty read calls the processor's on_idle hook (a processor that waits for time, not records, acts there); a
read with records does not, and an on_idle that raises restarts the shard from its checkpoint like a failed batch."""

from __future__ import annotations

from cdcbridge.coordination import ShutdownReason
from tests.unit.coordination.helpers import Cluster


def test_on_idle_is_called_after_empty_reads_only() -> None:
    cluster = Cluster()
    cluster.stream.put("k0")
    cluster.add_worker("w1")
    cluster.run_until(lambda: len(cluster.journal.deliveries) == 1)
    (processor,) = cluster.processors["w1"]
    before = processor.idle_calls
    cluster.run_for(5.0)
    assert processor.idle_calls > before, "caught up, every empty read calls on_idle"
    idle = processor.idle_calls
    cluster.stream.put("k1")
    cluster.run_until(lambda: len(cluster.journal.deliveries) == 2)
    assert [d.key for d in cluster.journal.deliveries] == ["k0", "k1"]
    assert processor.idle_calls <= idle + 1, "the read that returned k1 did not count as idle"


def test_an_on_idle_that_raises_restarts_the_shard_from_its_checkpoint() -> None:
    cluster = Cluster()
    cluster.stream.put("k0")
    cluster.add_worker("w1")
    cluster.run_until(lambda: len(cluster.journal.deliveries) == 1)
    (first,) = cluster.processors["w1"]
    first.fail_idle = True
    cluster.run_until(lambda: len(cluster.processors["w1"]) == 2)
    assert ShutdownReason.FAILED in first.shutdown_reasons
    cluster.stream.put("k1")
    cluster.run_until(lambda: [d.key for d in cluster.journal.deliveries][-1:] == ["k1"])
    assert [d.key for d in cluster.journal.deliveries] == ["k0", "k1"], "k0 was checkpointed: not delivered again"
