"""The lease store interface (KCL's LeaseRefresher): every lease operation of leases.md §5.2.

Each write is conditional on the state the caller observed, raises the counter by exactly one (except steal-request,
which only names the stealer) and returns the state it wrote. A lost race raises LeaseLostError and is never retried;
an unanswerable store raises LeaseStoreUnavailableError (the caller keeps its state and tries again next cycle).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.leases.lease import Lease


class LeaseStore(ABC):
    """Persistent, conditionally written lease rows of one status table."""

    @abstractmethod
    def ensure_table(self) -> None:
        """Create the status table if it is missing and wait until it serves requests."""

    @abstractmethod
    def list_leases(self, stream_id: str) -> list[Lease]:
        """Every lease row of a stream (a consistent read per row)."""

    @abstractmethod
    def get_lease(self, stream_id: str, shard_id: str) -> Lease | None:
        """One lease row, or None if there is none."""

    @abstractmethod
    def create_lease_if_absent(self, lease: Lease) -> bool:
        """Write a new row (counter 0) only if none exists (EXPECT_NOT_EXIST); False if a row was already there.
        An existing row is never reset (I1, T12)."""

    @abstractmethod
    def renew(self, lease: Lease) -> Lease:
        """counter+1, if counter and owner are still `lease.counter` / `lease.owner`."""

    @abstractmethod
    def checkpoint(self, lease: Lease, checkpoint: str, checkpoint_seq: ExtendedSequence | None) -> Lease:
        """counter+1 and a new Checkpoint (and CheckpointSeq unless None), if counter and owner are unchanged."""

    @abstractmethod
    def take(self, lease: Lease, new_owner: str) -> Lease:
        """counter+1, owner := new_owner, stealer := "", if the counter is still the observed `lease.counter`."""

    @abstractmethod
    def request_steal(self, lease: Lease, stealer: str) -> Lease:
        """stealer := `stealer` (counter unchanged), if the owner is still `lease.owner` and no one else asked."""

    @abstractmethod
    def transfer(self, lease: Lease, new_owner: str) -> Lease:
        """Hand-off to the stealer: counter+1, owner := new_owner, if counter and owner are unchanged."""

    @abstractmethod
    def release(self, lease: Lease) -> Lease:
        """Graceful give-up: counter+1, owner := "", if counter and owner are unchanged (peers take it at once)."""

    @abstractmethod
    def delete(self, lease: Lease) -> bool:
        """Remove the row if its counter is unchanged; False if it was already gone."""
