"""Scans the lease table and acts on the taker policy (KCL LeaseTaker): takes, and asks for hand-offs.

Observation times are taken *after* a scan returns, so they are never earlier than the owner's write they reflect:
that ordering is what makes the owner's self-fence happen before our expiry (I5, I6).
"""

from __future__ import annotations

import logging

from cdcbridge.coordination.clock import Clock
from cdcbridge.coordination.errors import LeaseLostError, LeaseStoreError
from cdcbridge.coordination.leases.held import HeldLease, HeldLeases
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.leases.store import LeaseStore
from cdcbridge.coordination.leases.taker_policy import LeaseTakerPolicy, Observation
from cdcbridge.coordination.stats import CoordinationStats

log = logging.getLogger(__name__)


class LeaseTaker:
    def __init__(
        self,
        store: LeaseStore,
        held: HeldLeases,
        worker_id: str,
        stream_id: str,
        clock: Clock,
        policy: LeaseTakerPolicy,
        stats: CoordinationStats,
    ) -> None:
        self._store = store
        self._held = held
        self._me = worker_id
        self._stream_id = stream_id
        self._clock = clock
        self._policy = policy
        self._stats = stats
        self._observations: dict[str, Observation] = {}
        #: Monotonic time of the last scan the store answered.
        self.last_contact_at = clock.monotonic()

    def take_leases(self) -> list[HeldLease]:
        """One taker cycle: scan, update observations, take, maybe ask for a hand-off. Returns new held leases."""
        try:
            leases = self._store.list_leases(self._stream_id)
        except LeaseStoreError as exc:
            log.warning("lease scan failed: %s", exc)
            return []
        now = self._clock.monotonic()
        self.last_contact_at = now
        self._observe(leases, now)
        for lease in leases:
            held = self._held.get(lease.shard_id)
            if held is not None:
                held.note_scanned(lease, self._me)
        plan = self._policy.plan(self._me, leases, self._observations, now, self._held.shard_ids())
        taken = [held for lease in plan.take if (held := self._take(lease)) is not None]
        for lease in plan.steal:
            self._request_steal(lease)
        return taken

    def _observe(self, leases: list[Lease], now: float) -> None:
        seen = {}
        for lease in leases:
            previous = self._observations.get(lease.shard_id)
            if previous is not None and previous.counter == lease.counter:
                seen[lease.shard_id] = previous
            else:
                seen[lease.shard_id] = Observation(lease.counter, now)
        self._observations = seen

    def _take(self, lease: Lease) -> HeldLease | None:
        sent_at = self._clock.monotonic()
        try:
            written = self._store.take(lease, self._me)
        except LeaseLostError:
            log.info("lost the race to take lease %s", lease.shard_id)
            return None
        except LeaseStoreError as exc:
            log.warning("taking lease %s failed: %s", lease.shard_id, exc)
            return None
        held = HeldLease(written, proved_at=sent_at)
        self._held.add(held)
        self._observations[lease.shard_id] = Observation(written.counter, self._clock.monotonic())
        self._stats.add("leases_taken")
        if lease.owner == self._me:  # the previous owner handed it over to us (a steal completed)
            previous = "(handed over to us)"
        else:
            previous = f"from {lease.owner}" if lease.is_owned else "(unowned)"
        log.info("took lease %s %s", lease.shard_id, previous)
        return held

    def _request_steal(self, lease: Lease) -> None:
        try:
            self._store.request_steal(lease, self._me)
        except (LeaseLostError, LeaseStoreError) as exc:
            log.info("steal request for %s not placed: %s", lease.shard_id, exc)
            return
        self._stats.add("steal_requests")
        log.info("asked %s to hand over lease %s", lease.owner, lease.shard_id)
