"""The seeded fault plan (no servers)."""

from __future__ import annotations

from collections import Counter

import pytest

from cdcbridge.harness.chaos.schedule import ALL_KINDS, FaultKind, plan_faults


def test_the_first_cycles_cover_every_kind_once() -> None:
    plan = plan_faults(len(ALL_KINDS), seed=3)
    assert sorted(plan) == sorted(ALL_KINDS)


def test_a_long_plan_spreads_the_kinds_evenly_and_depends_only_on_the_seed() -> None:
    plan = plan_faults(60, seed=11)
    counts = Counter(plan)
    assert set(counts) == set(ALL_KINDS)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert plan == plan_faults(60, seed=11)
    assert plan != plan_faults(60, seed=12)


def test_a_plan_can_be_limited_to_some_kinds() -> None:
    kinds = (FaultKind.WORKER_KILL, FaultKind.STREAM_TRIM)
    assert set(plan_faults(7, seed=1, kinds=kinds)) == set(kinds)
    assert plan_faults(0, seed=1) == []


def test_a_bad_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="cycles"):
        plan_faults(-1, seed=1)
    with pytest.raises(ValueError, match="at least one"):
        plan_faults(3, seed=1, kinds=())
