"""Creates a lease for every shard, parents first, and deletes leases of vanished shards (I8).

Creation is EXPECT_NOT_EXIST: an existing lease is never reset, however many syncers race (T12). A lease is deleted
only when its shard is no longer listed (its data expired) and every child lease has moved past TRIM_HORIZON, so a
child never mistakes a missing parent lease for a finished one and no lease of a listed shard is ever re-created
from TRIM_HORIZON (KCL #752).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from cdcbridge.coordination.checkpoint.positions import TRIM_HORIZON
from cdcbridge.coordination.errors import LeaseLostError, LeaseStoreError, StreamError
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.leases.store import LeaseStore
from cdcbridge.coordination.stats import CoordinationStats
from cdcbridge.coordination.stream.access import ShardInfo, ShardLister

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SyncResult:
    created: list[str]
    deleted: list[str]


def parents_first(shards: list[ShardInfo]) -> list[ShardInfo]:
    """Shards ordered so that every listed parent comes before its children."""
    by_id = {s.shard_id: s for s in shards}
    ordered: list[ShardInfo] = []
    visited: set[str] = set()
    entered: set[str] = set()  # guards against a (malformed) lineage cycle

    def visit(shard: ShardInfo) -> None:
        stack = [(shard, False)]
        while stack:
            current, expanded = stack.pop()
            if current.shard_id in visited:
                continue
            if expanded:
                visited.add(current.shard_id)
                ordered.append(current)
                continue
            if current.shard_id in entered:
                continue
            entered.add(current.shard_id)
            stack.append((current, True))
            for parent_id in reversed(current.parent_ids):
                parent = by_id.get(parent_id)
                if parent is not None and parent_id not in visited and parent_id not in entered:
                    stack.append((parent, False))

    for shard in shards:
        visit(shard)
    return ordered


class ShardSyncer:
    def __init__(self, store: LeaseStore, lister: ShardLister, stream_id: str, stats: CoordinationStats) -> None:
        self._store = store
        self._lister = lister
        self._stream_id = stream_id
        self._stats = stats
        self._lock = threading.Lock()
        self._listed: frozenset[str] | None = None

    def listed_shards(self) -> frozenset[str] | None:
        """Shard ids of the latest successful listing (None before the first)."""
        return self._listed

    def sync(self) -> SyncResult:
        """List shards and leases; create missing leases parents first; clean up. Raises on store/stream errors."""
        with self._lock:
            shards = self._lister.list_shards(self._stream_id)
            leases = {lease.shard_id: lease for lease in self._store.list_leases(self._stream_id)}
            self._listed = frozenset(s.shard_id for s in shards)
            created = self._create_missing(shards, leases)
            deleted = self._delete_vanished(leases)
            return SyncResult(created, deleted)

    def try_sync(self) -> SyncResult | None:
        """`sync`, logging instead of raising (the periodic path)."""
        try:
            return self.sync()
        except (LeaseStoreError, StreamError) as exc:
            log.warning("shard sync failed, will retry: %s", exc)
            return None

    def _create_missing(self, shards: list[ShardInfo], leases: dict[str, Lease]) -> list[str]:
        created = []
        for shard in parents_first(shards):
            if shard.shard_id in leases:
                continue
            lease = Lease(self._stream_id, shard.shard_id, parent_shard_ids=shard.parent_ids)
            try:
                was_created = self._store.create_lease_if_absent(lease)
            except LeaseStoreError as exc:
                # Go on: a child created without its parent's lease blocks until a later sync creates it (I4).
                log.warning("could not create the lease of shard %s, next sync retries: %s", shard.shard_id, exc)
                continue
            if was_created:
                created.append(shard.shard_id)
                self._stats.add("leases_created")
                log.info("created lease for shard %s (parents %s)", shard.shard_id, list(shard.parent_ids) or "-")
        return created

    def _delete_vanished(self, leases: dict[str, Lease]) -> list[str]:
        listed = self._listed or frozenset()
        children: dict[str, list[Lease]] = {}
        for lease in leases.values():
            for parent_id in lease.parent_shard_ids:
                children.setdefault(parent_id, []).append(lease)
        deleted = []
        for lease in leases.values():
            if lease.shard_id in listed:
                continue
            kids = children.get(lease.shard_id, [])
            if any(c.checkpoint == TRIM_HORIZON and c.shard_id in listed for c in kids):
                continue  # a child still has to see this lease's final state
            if not lease.is_finished:
                log.error(
                    "DATA LOSS shard %s is no longer listed by the stream (its data expired, or its lease row was "
                    "added by hand) and was not read to its end (checkpoint %r); deleting its lease",
                    lease.shard_id,
                    lease.checkpoint,
                )
            try:
                if self._store.delete(lease):
                    deleted.append(lease.shard_id)
                    self._stats.add("leases_deleted")
            except LeaseLostError:
                continue  # it changed since the scan; look again next sync
        return deleted
