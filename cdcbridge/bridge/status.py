"""`cdcbridge status`: what the cluster of bridge workers is doing, read from the status table and the streams.

Per shard: owner, stealer, checkpoint, parents, how long ago the lease was last renewed (the version timestamp of
its LeaseCounter cell, which every lease write bumps) and the lag: records after the checkpoint and the age of the
oldest of them. Per topic: the partition count recorded at creation and the count Kafka reports now.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from tablestore import INF_MAX, INF_MIN, OTSClient

from cdcbridge.bridge.topic_record import TopicPartitionRecord
from cdcbridge.config import BridgeConfig
from cdcbridge.coordination.checkpoint.positions import SHARD_END, TRIM_HORIZON
from cdcbridge.coordination.leases.lease import (
    COL_LEASE_COUNTER,
    COL_STATUS_TYPE,
    COL_STATUS_VALUE,
    COL_STREAM_ID,
    LEASE_STATUS_TYPE,
    Lease,
)
from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore
from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.connection import build_ots_client
from cdcbridge.tablestore.errors import StreamError

#: Lag is counted by reading the stream from the checkpoint; stop counting after this many records.
LAG_COUNT_LIMIT = 10_000


@dataclass
class ShardStatus:
    table: str
    shard_id: str
    owner: str
    stealer: str
    checkpoint: str
    checkpoint_seq: str
    parents: list[str]
    renewed_seconds_ago: float | None
    lag_records: int | None
    lag_records_capped: bool
    lag_seconds: float | None
    finished: bool


@dataclass
class TopicStatus:
    topic: str
    recorded_partitions: int | None
    actual_partitions: int | None


@dataclass
class ClusterStatus:
    shards: list[ShardStatus] = field(default_factory=list)
    topics: list[TopicStatus] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def owners(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for shard in self.shards:
            if shard.owner and not shard.finished:
                counts[shard.owner] = counts.get(shard.owner, 0) + 1
        return counts


def _renew_times(client: OTSClient, status_table: str, stream_id: str) -> dict[str, int]:
    """shard id → ms timestamp of the latest LeaseCounter write."""
    start: Any = [(COL_STREAM_ID, stream_id), (COL_STATUS_TYPE, LEASE_STATUS_TYPE), (COL_STATUS_VALUE, INF_MIN)]
    end = [(COL_STREAM_ID, stream_id), (COL_STATUS_TYPE, LEASE_STATUS_TYPE), (COL_STATUS_VALUE, INF_MAX)]
    times: dict[str, int] = {}
    while start:
        _, start, rows, _ = client.get_range(
            status_table, "FORWARD", start, end, columns_to_get=[COL_LEASE_COUNTER], max_version=1
        )
        for row in rows:
            shard = dict(row.primary_key)[COL_STATUS_VALUE]
            for name, _value, timestamp in row.attribute_columns:
                if name == COL_LEASE_COUNTER:
                    times[shard] = timestamp
    return times


def _lag(streams: StreamClient, stream_id: str, lease: Lease, now_us: int) -> tuple[int | None, bool, float | None]:
    """(records after the checkpoint, whether counting stopped at the limit, age in s of the oldest of them)."""
    if lease.checkpoint == SHARD_END:
        return 0, False, 0.0
    iterator = lease.checkpoint
    if iterator == TRIM_HORIZON:
        iterator = streams.get_shard_iterator(stream_id, lease.shard_id)
    behind, oldest_us = 0, None
    while iterator and behind < LAG_COUNT_LIMIT:
        page = streams.get_stream_record(iterator, 1000)
        for record in page.records:
            if lease.checkpoint_seq is not None and lease.checkpoint_seq.covers(record.sequence):
                continue
            behind += 1
            oldest_us = record.sequence.timestamp_us if oldest_us is None else oldest_us
        if not page.records or page.next_shard_iterator == iterator:
            break
        iterator = page.next_shard_iterator
    age = 0.0 if oldest_us is None else max(0.0, (now_us - oldest_us) / 1e6)
    return behind, behind >= LAG_COUNT_LIMIT, age


def collect_status(config: BridgeConfig, *, with_lag: bool = True) -> ClusterStatus:
    source = config.source
    client = build_ots_client(
        source.endpoint, source.instance, source.access_key_id.get_secret_value(),
        source.access_key_secret.get_secret_value(), region=source.region,
    )  # fmt: skip
    streams = StreamClient(client, check_crc=source.check_crc)
    store = TablestoreLeaseStore(client, config.coordination.status_table)
    status = ClusterStatus()
    now_ms = time.time() * 1000
    actual_counts: dict[str, int] = {}
    try:
        from cdcbridge.kafka.topics import TopicAdmin

        names = [
            t
            for table in source.tables
            for t in table.topics(prefix=config.kafka.topic_prefix, table=table.name).values()
        ]
        actual_counts = TopicAdmin(config.kafka.client_config(), timeout=5).partition_counts(names)
    except Exception as error:  # status must still show the leases when Kafka is down
        status.errors.append(f"Kafka: {error}")
    for table in source.tables:
        try:
            stream_id = streams.describe_table_stream(table.name).stream_id
        except StreamError as error:
            status.errors.append(f"table {table.name}: {error}")
            continue
        if not stream_id:
            status.errors.append(f"table {table.name}: no stream enabled")
            continue
        renewed = _renew_times(client, config.coordination.status_table, stream_id)
        for lease in sorted(store.list_leases(stream_id), key=lambda lease: lease.shard_id):
            lag: tuple[int | None, bool, float | None] = (None, False, None)
            if with_lag:
                try:
                    lag = _lag(streams, stream_id, lease, int(now_ms * 1000))
                except StreamError as error:
                    status.errors.append(f"lag of shard {lease.shard_id}: {error}")
            renew_ms = renewed.get(lease.shard_id)
            status.shards.append(ShardStatus(
                table=table.name, shard_id=lease.shard_id, owner=lease.owner, stealer=lease.stealer,
                checkpoint=lease.checkpoint if lease.checkpoint in (SHARD_END, TRIM_HORIZON) else "iterator",
                checkpoint_seq=lease.checkpoint_seq.to_text() if lease.checkpoint_seq else "",
                parents=list(lease.parent_shard_ids),
                renewed_seconds_ago=None if renew_ms is None else round(max(0.0, now_ms - renew_ms) / 1000, 1),
                lag_records=lag[0], lag_records_capped=lag[1],
                lag_seconds=None if lag[2] is None else round(lag[2], 1), finished=lease.is_finished,
            ))  # fmt: skip
        topics = table.topics(prefix=config.kafka.topic_prefix, table=table.name).values()
        recorded = TopicPartitionRecord(client, config.coordination.status_table, stream_id).read(topics)
        status.topics += [TopicStatus(t, recorded.get(t), actual_counts.get(t)) for t in topics]
    return status


def render_text(status: ClusterStatus) -> str:
    header = (
        f"{'TABLE':<14} {'SHARD':<28} {'OWNER':<18} {'CHECKPOINT':<11} {'RENEWED':>8} {'LAG':>8} {'LAG_S':>7}"
        "  PARENTS / STEALER"
    )
    lines = [header]
    for s in status.shards:
        lag = "-" if s.lag_records is None else f"{s.lag_records}{'+' if s.lag_records_capped else ''}"
        renewed = "-" if s.renewed_seconds_ago is None else f"{s.renewed_seconds_ago:.1f}s"
        lag_s = "-" if s.lag_seconds is None else f"{s.lag_seconds:.1f}"
        extra = ",".join(s.parents) or "-"
        if s.stealer:
            extra += f" / stealer {s.stealer}"
        lines.append(f"{s.table:<14} {s.shard_id:<28} {s.owner or '-':<18} {s.checkpoint:<11} {renewed:>8} "
                     f"{lag:>8} {lag_s:>7}  {extra}")  # fmt: skip
    lines.append("")
    lines.append(f"{'TOPIC':<40} {'RECORDED':>9} {'ACTUAL':>7}")
    for t in status.topics:
        flag = (
            ""
            if t.actual_partitions in (None, t.recorded_partitions)
            else "  MISMATCH: the bridge will refuse to start"
        )
        lines.append(f"{t.topic:<40} {t.recorded_partitions or '-':>9} {t.actual_partitions or '-':>7}{flag}")
    if status.owners:
        lines.append("")
        lines.append("active leases per worker: " + ", ".join(f"{w}={n}" for w, n in sorted(status.owners.items())))
    for error in status.errors:
        lines.append(f"warning: {error}")
    return "\n".join(lines)
