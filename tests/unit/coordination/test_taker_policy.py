"""The taker policy on its own (I6, I7): expiry by own observation, targets, priorities, when to steal."""

from __future__ import annotations

import random

from cdcbridge.coordination import SHARD_END, Lease
from cdcbridge.coordination.leases.taker_policy import LeaseTakerPolicy, Observation

D = 20.0


def _policy() -> LeaseTakerPolicy:
    return LeaseTakerPolicy(D, steals_per_cycle=1, rng=random.Random(7))


def _leases(spec: dict[str, str], **extra: Lease) -> list[Lease]:
    """{shard: owner} → leases (counter 1)."""
    leases = [Lease("st", shard, counter=1, owner=owner) for shard, owner in spec.items()]
    return leases + list(extra.values())


def _fresh(leases: list[Lease], now: float) -> dict[str, Observation]:
    return {lease.shard_id: Observation(lease.counter, now) for lease in leases}


def test_an_owned_lease_expires_only_after_a_lease_duration_of_our_own_observation() -> None:
    policy = _policy()
    lease = Lease("st", "a", counter=5, owner="w1")
    seen = Observation(5, since=100.0)
    assert not policy.is_available(lease, seen, 100.0 + D - 0.001)
    assert policy.is_available(lease, seen, 100.0 + D)


def test_released_leases_are_available_at_once_and_finished_ones_never() -> None:
    policy = _policy()
    now = 50.0
    assert policy.is_available(Lease("st", "a", counter=3, owner=""), Observation(3, now), now)
    finished = Lease("st", "b", counter=3, owner="", checkpoint=SHARD_END)
    assert not policy.is_available(finished, Observation(3, 0.0), now)


def test_new_worker_takes_unowned_leases_up_to_its_target() -> None:
    leases = _leases({"a": "w1", "b": "w1", "c": "", "d": "", "e": "", "f": ""})
    plan = _policy().plan("w2", leases, _fresh(leases, 0.0), 1.0, set())
    # 6 active leases over w1 + w2 → target 3; w2 has none.
    assert plan.target == 3
    assert len(plan.take) == 3 and all(not lease.is_owned for lease in plan.take)
    assert plan.steal == []


def test_finished_leases_do_not_count_towards_the_target() -> None:
    finished = {f"done{i}": Lease("st", f"done{i}", counter=9, owner="w1", checkpoint=SHARD_END) for i in range(6)}
    leases = _leases({"a": "w1", "b": "w1"}, **finished)
    plan = _policy().plan("w2", leases, _fresh(leases, 0.0), 1.0, set())
    assert plan.target == 1
    assert [lease.shard_id for lease in plan.steal] in (["a"], ["b"])  # most (2) > target (1)
    assert all(not lease.is_finished for lease in plan.take + plan.steal)


def test_unowned_and_very_old_leases_are_taken_before_merely_expired_ones() -> None:
    leases = _leases({"old": "dead1", "expired": "dead2", "free": ""})
    observations = {
        "old": Observation(1, 0.0),  # unchanged for ≥ 3D
        "expired": Observation(1, 3 * D + 10 - D),  # just expired
        "free": Observation(1, 3 * D + 10),
    }
    plan = LeaseTakerPolicy(D, 1, random.Random(1)).plan("w9", leases, observations, 3 * D + 10, set())
    # target = ceil(3 / 1) = 3: all three, but unowned/very old first.
    assert [lease.shard_id for lease in plan.take][2] == "expired"


def test_steal_only_when_nothing_is_available_and_only_from_the_most_loaded() -> None:
    leases = _leases({"a": "w1", "b": "w1", "c": "w1", "d": "w1", "e": "w2", "f": "w2", "g": ""})
    plan = _policy().plan("w3", leases, _fresh(leases, 0.0), 1.0, set())
    assert [lease.shard_id for lease in plan.take] == ["g"] and plan.steal == []  # something was available

    leases = _leases({"a": "w1", "b": "w1", "c": "w1", "d": "w1", "e": "w2", "f": "w2"})
    plan = _policy().plan("w3", leases, _fresh(leases, 0.0), 1.0, set())
    assert plan.take == [] and len(plan.steal) == 1 and plan.steal[0].owner == "w1"


def test_no_steal_at_the_balanced_shape_n_plus_one_n_n() -> None:
    leases = _leases({f"l{i}": owner for i, owner in enumerate(["w1"] * 4 + ["w2"] * 3 + ["w3"] * 3)})
    for me in ("w1", "w2", "w3"):
        plan = _policy().plan(me, leases, _fresh(leases, 0.0), 1.0, {f"l{i}" for i in range(10)})
        assert plan.take == [] and plan.steal == []


def test_steal_from_a_worker_at_target_only_when_we_need_two() -> None:
    leases = _leases({f"l{i}": owner for i, owner in enumerate(["w1"] * 4 + ["w2"] * 4 + ["w3"] * 2)})
    plan = _policy().plan("w3", leases, _fresh(leases, 0.0), 1.0, set())
    assert plan.target == 4 and len(plan.steal) == 1  # need 2, most == target


def test_a_lease_in_hand_off_counts_for_the_stealer_and_is_not_stolen_twice() -> None:
    leases = _leases({"a": "w1", "b": "w1", "c": "w1"})
    leases.append(Lease("st", "d", counter=1, owner="w1", stealer="w2"))
    plan = _policy().plan("w2", leases, _fresh(leases, 0.0), 1.0, set())
    # counts: w1 = 3, w2 = 1 (in transit) → target 2, w2 needs 1; most (3) > target: steal one of a, b, c.
    assert len(plan.steal) == 1 and plan.steal[0].shard_id in {"a", "b", "c"}


def test_a_lease_handed_to_us_is_taken_first() -> None:
    leases = _leases({"a": "w1", "b": "w1"})
    leases.append(Lease("st", "c", counter=4, owner="w2", stealer="w2"))
    plan = _policy().plan("w2", leases, _fresh(leases, 0.0), 1.0, set())
    assert [lease.shard_id for lease in plan.take] == ["c"]


def test_steals_per_cycle_caps_requests() -> None:
    leases = _leases({f"l{i}": "w1" for i in range(9)})
    plan = LeaseTakerPolicy(D, steals_per_cycle=2, rng=random.Random(0)).plan("w2", leases, _fresh(leases, 0), 1, set())
    assert len(plan.steal) == 2
    plan = LeaseTakerPolicy(D, steals_per_cycle=0, rng=random.Random(0)).plan("w2", leases, _fresh(leases, 0), 1, set())
    assert plan.steal == []
