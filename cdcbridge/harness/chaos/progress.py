"""Where the bridge stands, judged from the lease rows against the stream (pure functions, tested without servers).

- Recovery after a fault: every shard's checkpoint has passed a record committed after the fault ended (or the shard
  is finished). New records keep arriving from the load, so a shard that stays behind is one nobody reads.
- The end of a run: every shard's checkpoint covers its last record.
- A safe trim: only records every shard has checkpointed may be trimmed, so a trim never takes unread data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from cdcbridge.changes import Sequence as RecordSequence
from cdcbridge.coordination.leases.lease import Lease


def lagging_shards(shard_ids: Iterable[str], leases: Mapping[str, Lease], since_us: int) -> list[str]:
    """Shards not yet past `since_us`: no lease, or an unfinished lease whose checkpoint is older than it."""
    lagging = []
    for shard_id in shard_ids:
        lease = leases.get(shard_id)
        if lease is None or not _passed(lease, since_us):
            lagging.append(shard_id)
    return lagging


def _passed(lease: Lease, since_us: int) -> bool:
    if lease.is_finished:
        return True
    return lease.checkpoint_seq is not None and lease.checkpoint_seq.sequence.timestamp_us >= since_us


def undelivered_shards(last_records: Mapping[str, RecordSequence], leases: Mapping[str, Lease]) -> list[str]:
    """Shards whose last record is not yet covered by their checkpoint (a finished shard is covered)."""
    behind = []
    for shard_id, last in last_records.items():
        lease = leases.get(shard_id)
        covered = lease is not None and (
            lease.is_finished or (lease.checkpoint_seq is not None and lease.checkpoint_seq.covers(last))
        )
        if not covered:
            behind.append(shard_id)
    return behind


def safe_trim_before_us(
    records_by_shard: Mapping[str, Sequence[RecordSequence]], leases: Mapping[str, Lease], now_us: int
) -> int:
    """The latest commit time a trim may cut at: every record committed before it is checkpointed in its shard.

    Per shard, the first record its checkpoint does not cover bounds the cut (records of one shard are in commit
    order, so everything before that record is covered); a finished shard or a fully covered one adds no bound.
    """
    bound = now_us
    for shard_id, sequences in records_by_shard.items():
        lease = leases.get(shard_id)
        if lease is not None and lease.is_finished:
            continue
        position = lease.checkpoint_seq if lease is not None else None
        for sequence in sequences:
            if position is None or not position.covers(sequence):
                bound = min(bound, sequence.timestamp_us)
                break
    return bound
