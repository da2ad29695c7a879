"""The small parts of the incremental exporter: the rows/s budget, --from/--to key texts, which shards must report."""

from __future__ import annotations

import pytest
from tablestore import INF_MIN

from cdcbridge.coordination.checkpoint.positions import SHARD_END
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.snapshot.key_text import KeyTextError, parse_key_text
from cdcbridge.snapshot.rate_limit import RowRateLimiter
from cdcbridge.snapshot.report_quorum import missing_reports, shard_nodes, shards_needing_reports
from cdcbridge.tablestore.models import ShardInfo

SCHEMA = [("region", "STRING"), ("id", "INTEGER"), ("blob", "BINARY")]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_lets_a_chunk_through_and_makes_the_next_wait_for_its_rows() -> None:
    clock = Clock()
    limiter = RowRateLimiter(100, clock=clock)
    assert limiter.delay() == 0
    limiter.spend(300)  # 100 in the bucket, 200 in debt
    assert limiter.delay() == pytest.approx(2.0)
    clock.now = 1.5
    assert limiter.delay() == pytest.approx(0.5)
    clock.now = 60  # a long pause refills one second's worth only
    limiter.spend(150)
    assert limiter.delay() == pytest.approx(0.5)
    unlimited = RowRateLimiter(None, clock=clock)
    unlimited.spend(10**9)
    assert unlimited.delay() == 0


def test_key_texts_fill_left_out_columns_with_minus_infinity_and_type_the_values() -> None:
    assert parse_key_text("--from", "region=eu", SCHEMA) == [("region", "eu"), ("id", INF_MIN), ("blob", INF_MIN)]
    assert parse_key_text("--to", "region=us,id=42,blob=AAE=", SCHEMA) == [
        ("region", "us"), ("id", 42), ("blob", b"\x00\x01"),
    ]  # fmt: skip
    with pytest.raises(KeyTextError, match="in key order"):
        parse_key_text("--from", "id=4", SCHEMA)
    with pytest.raises(KeyTextError, match="INTEGER; 'x' is not a number"):
        parse_key_text("--from", "region=eu,id=x", SCHEMA)
    with pytest.raises(KeyTextError, match="not NAME=VALUE"):
        parse_key_text("--from", "eu", SCHEMA)


def test_a_shard_needs_a_report_when_unfinished_with_every_parent_finished() -> None:
    shards = [ShardInfo("p", None, None), ShardInfo("c1", "p", None), ShardInfo("c2", "p", None),
              ShardInfo("m", "c1", "c2"), ShardInfo("new", None, None)]  # fmt: skip
    leases = [Lease("s", "p", checkpoint=SHARD_END), Lease("s", "c1", owner="w1"),
              Lease("s", "c2", checkpoint=SHARD_END), Lease("s", "gone", owner="w2")]  # fmt: skip
    nodes = shard_nodes(shards, leases)
    # c1 and the lease-less new shard need one; m waits on c1 (covered); the expired shard's lease still counts.
    assert shards_needing_reports(nodes) == ["c1", "gone", "new"]
    assert [node.shard_id for node in missing_reports(nodes, ["c1"])] == ["gone", "new"]
    assert nodes["new"].owner == "" and nodes["c1"].owner == "w1"
