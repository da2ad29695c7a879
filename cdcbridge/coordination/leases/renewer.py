"""Keeps held leases alive (KCL LeaseRenewer): one conditional counter bump per lease and cycle.

A lease not proved within the self-fence window is dropped locally before any peer may take it (I5); a failed
condition drops it at once. Transport errors keep it: the next cycle tries again while the window allows.
"""

from __future__ import annotations

import logging

from cdcbridge.coordination.clock import Clock
from cdcbridge.coordination.errors import LeaseLostError, LeaseStoreError
from cdcbridge.coordination.leases.held import HeldLease, HeldLeases
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.leases.store import LeaseStore
from cdcbridge.coordination.settings import CoordinationSettings
from cdcbridge.coordination.stats import CoordinationStats

log = logging.getLogger(__name__)


class LeaseRenewer:
    def __init__(
        self,
        store: LeaseStore,
        held: HeldLeases,
        worker_id: str,
        clock: Clock,
        settings: CoordinationSettings,
        stats: CoordinationStats,
    ) -> None:
        self._store = store
        self._held = held
        self._me = worker_id
        self._clock = clock
        self._settings = settings
        self._stats = stats
        #: Monotonic time of the last renewal the store answered (success or a definite loss).
        self.last_contact_at = clock.monotonic()

    def adopt(self, leases: list[Lease]) -> list[HeldLease]:
        """At start-up, keep the leases the table says are ours (same worker id restarted), like the Java client.

        Adoption is a take at the counter just read (not a renew): it also clears a steal request we made on the
        lease in a previous life, which would otherwise keep it from ever being stolen again.
        """
        adopted = []
        for lease in leases:
            if lease.owner != self._me or self._held.get(lease.shard_id) is not None:
                continue
            sent_at = self._clock.monotonic()
            try:
                if lease.is_finished:
                    self._store.release(lease)  # finished while we crashed before releasing it
                    continue
                written = self._store.take(lease, self._me)
            except (LeaseLostError, LeaseStoreError) as exc:
                log.info("not adopting lease %s: %s", lease.shard_id, exc)
                continue
            held = HeldLease(written, proved_at=sent_at)
            self._held.add(held)
            adopted.append(held)
            self._stats.add("leases_taken")
            log.info("adopted our lease %s from a previous run", written.describe())
        return adopted

    def renew_all(self) -> None:
        """One renewal cycle over every held lease."""
        for held in self._held.active():
            now = self._clock.monotonic()
            if not held.is_fresh(now, self._settings.self_fence_after_seconds):
                if held.mark_ended("lost: not renewed within the self-fence window"):
                    log.warning("lease %s expired locally before it could be renewed", held.shard_id)
                continue
            try:
                held.write(self._clock, self._store.renew)
            except LeaseLostError as exc:
                self.last_contact_at = self._clock.monotonic()
                if (held.ended or "").startswith("lost"):  # not when a hand-off or release ended it meanwhile
                    log.warning("%s", exc)
                continue
            except LeaseStoreError as exc:
                log.warning("renewing lease %s failed, will retry: %s", held.shard_id, exc)
                continue
            self.last_contact_at = self._clock.monotonic()
            self._stats.add("leases_renewed")
