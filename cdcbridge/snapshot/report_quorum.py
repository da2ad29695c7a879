"""Which stream shards must report on a chunk before the exporter may emit it (the window/fence protocol).

A shard needs a report when it is not finished (its lease is not at SHARD_END) and every parent it has is
finished. A child whose parent is unfinished is covered by the parent: the parent reports only once it passed the
fence F, so the split that created the child came after F and every record of the child is newer than F (it is
held like any record > F). Finished shards produced and acknowledged everything; they need no report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cdcbridge.coordination.leases.lease import Lease


@dataclass(frozen=True)
class ShardNode:
    """What the rule needs of one shard: its parents (stream description or lease) and whether it is finished."""

    shard_id: str
    parents: tuple[str, ...]
    finished: bool
    owner: str = ""


def shard_nodes(shards: Iterable[object], leases: Iterable[Lease]) -> dict[str, ShardNode]:
    """The shards of the stream (DescribeStream's `ShardInfo`: shard_id, parent_id, parent_sibling_id) joined with
    their leases; a shard without a lease yet is unfinished and unowned. Leases of shards the stream no longer lists
    (expired) count as they are."""
    by_id = {lease.shard_id: lease for lease in leases}
    nodes: dict[str, ShardNode] = {}
    for shard in shards:
        shard_id = shard.shard_id  # type: ignore[attr-defined]
        parents = tuple(p for p in (shard.parent_id, shard.parent_sibling_id) if p)  # type: ignore[attr-defined]
        lease = by_id.get(shard_id)
        nodes[shard_id] = ShardNode(
            shard_id, parents or (lease.parent_shard_ids if lease else ()), bool(lease and lease.is_finished),
            lease.owner if lease else "",
        )  # fmt: skip
    for shard_id, lease in by_id.items():
        if shard_id not in nodes:
            nodes[shard_id] = ShardNode(shard_id, lease.parent_shard_ids, lease.is_finished, lease.owner)
    return nodes


def shards_needing_reports(nodes: Mapping[str, ShardNode]) -> list[str]:
    """Shard ids (sorted) that must have a passed report. A parent the stream no longer lists (expired) is finished."""
    needing = []
    for node in nodes.values():
        if node.finished:
            continue
        if all(nodes[parent].finished if parent in nodes else True for parent in node.parents):
            needing.append(node.shard_id)
    return sorted(needing)


def missing_reports(nodes: Mapping[str, ShardNode], passed: Iterable[str]) -> list[ShardNode]:
    """The shards the exporter still waits for: needing a report and without a passed one."""
    have = set(passed)
    return [nodes[shard_id] for shard_id in shards_needing_reports(nodes) if shard_id not in have]
