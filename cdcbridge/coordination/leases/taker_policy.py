"""Who takes which lease: the whole balancing policy in one pure class (leases.md §5.5 I6, I7).

- A lease is expired only when its counter has not moved in *our own* observations for a lease duration (monotonic
  clock, no cross-host time comparison); a released lease (owner "") is available at once.
- FINISHED (SHARD_END) leases are ignored entirely: never taken, never counted.
- target = ceil(active leases / workers); a lease being handed to a stealer counts for the stealer.
- Leases handed to us by a transfer are taken first; then available ones (unowned or very old first) up to our need.
- Only when nothing is available: at most `steals_per_cycle` steal requests, from the most loaded worker, and only if
  it has more than the target, or exactly the target while we need two or more (no thrash at {n+1, n, n}).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field

from cdcbridge.coordination.leases.lease import Lease


@dataclass(frozen=True, slots=True)
class Observation:
    """The counter we last saw on a lease and since when (monotonic) it has had that value."""

    counter: int
    since: float


@dataclass(frozen=True, slots=True)
class TakePlan:
    take: list[Lease] = field(default_factory=list)
    steal: list[Lease] = field(default_factory=list)
    target: int = 0


class LeaseTakerPolicy:
    #: Leases unrenewed for this many lease durations are taken before others (KCL's priority leases).
    VERY_OLD_FACTOR = 3

    def __init__(self, lease_duration_seconds: float, steals_per_cycle: int, rng: random.Random | None = None) -> None:
        self._duration = lease_duration_seconds
        self._steals = steals_per_cycle
        self._rng = rng or random.Random()

    def is_available(self, lease: Lease, observation: Observation, now: float) -> bool:
        """Unowned, or owned but unchanged in our observations for a whole lease duration (I6)."""
        if lease.is_finished:
            return False
        return not lease.is_owned or now - observation.since >= self._duration

    def plan(
        self,
        me: str,
        leases: list[Lease],
        observations: dict[str, Observation],
        now: float,
        held_by_me: set[str],
    ) -> TakePlan:
        active = [lease for lease in leases if not lease.is_finished]
        if not active:
            return TakePlan()
        available = [
            lease
            for lease in active
            if lease.shard_id not in held_by_me and self.is_available(lease, observations[lease.shard_id], now)
        ]
        available_ids = {lease.shard_id for lease in available}
        handed_to_me = [
            lease
            for lease in active
            if lease.owner == me
            and lease.stealer == me
            and lease.shard_id not in held_by_me
            and lease.shard_id not in available_ids
        ]
        counts: Counter[str] = Counter()
        for lease in active:
            if lease.shard_id in available_ids:
                continue
            counts[lease.stealer if lease.has_stealer else lease.owner] += 1
        counts[me] += 0
        target = math.ceil(len(active) / len(counts))
        need = target - counts[me]

        take = list(handed_to_me)
        if need > 0 and available:
            take += self._by_priority(available, observations, now)[:need]
            need -= min(need, len(available))
        steal: list[Lease] = []
        if need > 0 and not available and self._steals > 0:
            steal = self._steal_candidates(me, active, counts, target, need)
        return TakePlan(take=take, steal=steal, target=target)

    def _by_priority(self, available: list[Lease], observations: dict[str, Observation], now: float) -> list[Lease]:
        """Unowned and very old leases first (they are surely abandoned), random within each group."""
        shuffled = list(available)
        self._rng.shuffle(shuffled)
        very_old = self.VERY_OLD_FACTOR * self._duration

        def group(lease: Lease) -> int:
            if not lease.is_owned or now - observations[lease.shard_id].since >= very_old:
                return 0
            return 1

        return sorted(shuffled, key=group)

    def _steal_candidates(
        self, me: str, active: list[Lease], counts: Counter[str], target: int, need: int
    ) -> list[Lease]:
        others = [(count, worker) for worker, count in counts.items() if worker != me]
        if not others:
            return []
        most = max(count for count, _ in others)
        if not (most > target or (most == target and need >= 2)):
            return []
        victim = self._rng.choice(sorted(worker for count, worker in others if count == most))
        candidates = [lease for lease in active if lease.owner == victim and not lease.has_stealer]
        candidates.sort(key=lambda lease: lease.shard_id)
        return self._rng.sample(candidates, min(self._steals, len(candidates)))
