"""The leases this worker holds, one object per acquisition.

All writes to a held lease (renewer, checkpointer threads, hand-off) go through `HeldLease.write`, which serialises
them and always uses the last counter we wrote, so our own writes never race each other. `proved_at` is the
monotonic *send* time of the last successful write: peers start their expiry clock no earlier than they observe that
write, so an owner that stops acting at `proved_at + lease - margin` stops before anyone can take over (I5).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

from cdcbridge.coordination.clock import Clock
from cdcbridge.coordination.errors import LeaseLostError
from cdcbridge.coordination.leases.lease import NOBODY, Lease

_tokens = itertools.count(1)


class HeldLease:
    """Our current ownership of one lease."""

    def __init__(self, lease: Lease, proved_at: float) -> None:
        self._lock = threading.RLock()
        self._lease = lease
        self._proved_at = proved_at
        self._ended: str | None = None
        self._stealer = NOBODY
        #: Distinguishes acquisitions: a lease lost and re-taken is a new HeldLease with a new token.
        self.token = next(_tokens)
        #: Counter right after we acquired it; scans older than this say nothing about this acquisition.
        self.acquired_counter = lease.counter

    @property
    def shard_id(self) -> str:
        return self._lease.shard_id

    @property
    def lease(self) -> Lease:
        with self._lock:
            return self._lease

    @property
    def proved_at(self) -> float:
        with self._lock:
            return self._proved_at

    @property
    def ended(self) -> str | None:
        """Why we no longer hold it (lost, released, transferred, fenced), or None while held."""
        with self._lock:
            return self._ended

    @property
    def stealer(self) -> str:
        """A worker that asked for this lease (learned from a table scan), or ""."""
        with self._lock:
            return self._stealer

    def is_fresh(self, now: float, fence_after_seconds: float) -> bool:
        """Whether we may still act as owner: held, and proved within the self-fence window (I5)."""
        with self._lock:
            return self._ended is None and now - self._proved_at < fence_after_seconds

    def write(self, clock: Clock, operation: Callable[[Lease], Lease], *, ends_with: str | None = None) -> Lease:
        """Run one store write against our latest state. `ends_with` marks a write that gives the lease up."""
        with self._lock:
            if self._ended is not None:
                raise LeaseLostError(self.shard_id, f"no longer held ({self._ended})")
            sent_at = clock.monotonic()
            try:
                written = operation(self._lease)
            except LeaseLostError:
                self._ended = self._ended or "lost: a conditional write failed"
                raise
            self._lease = written
            self._proved_at = sent_at
            if ends_with is not None:
                self._ended = ends_with
            return written

    def mark_ended(self, reason: str) -> bool:
        """Stop holding without a write (expired locally, lost in a scan, fenced); False if already ended."""
        with self._lock:
            if self._ended is not None:
                return False
            self._ended = reason
            return True

    def note_scanned(self, scanned: Lease, me: str) -> None:
        """Learn from a table scan: a steal request on our lease, or proof that someone else owns it now."""
        with self._lock:
            if self._ended is not None or scanned.counter < self.acquired_counter:
                return  # a scan from before this acquisition says nothing about it
            if scanned.owner != me and scanned.counter >= self._lease.counter:
                self._ended = f"lost: the table shows owner {scanned.owner or '(none)'} at counter {scanned.counter}"
            elif scanned.owner == me and scanned.stealer not in (NOBODY, me):
                self._stealer = scanned.stealer


class HeldLeases:
    """Thread-safe registry shard id → HeldLease of this worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_shard: dict[str, HeldLease] = {}

    def add(self, held: HeldLease) -> None:
        with self._lock:
            self._by_shard[held.shard_id] = held

    def get(self, shard_id: str) -> HeldLease | None:
        with self._lock:
            return self._by_shard.get(shard_id)

    def remove(self, held: HeldLease) -> None:
        """Forget `held` (only that acquisition: a newer one under the same shard stays)."""
        with self._lock:
            if self._by_shard.get(held.shard_id) is held:
                del self._by_shard[held.shard_id]

    def all(self) -> list[HeldLease]:
        with self._lock:
            return list(self._by_shard.values())

    def active(self) -> list[HeldLease]:
        """Held leases that have not ended."""
        return [h for h in self.all() if h.ended is None]

    def shard_ids(self) -> set[str]:
        return {h.shard_id for h in self.active()}
