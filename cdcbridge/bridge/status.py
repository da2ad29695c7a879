"""`cdcbridge status`: what the cluster of bridge workers is doing, read from the status table and the streams.

Per shard: owner, stealer, checkpoint, parents, how long ago the lease was last renewed (the version timestamp of
its LeaseCounter cell, which every lease write bumps) and the lag: records after the checkpoint and the age of the
oldest of them, also as the share of the stream's expiration used (RETAIN; TRIMMED once records after the
checkpoint were trimmed). Per topic: the partition count recorded at creation and the count Kafka reports now.
Per table with a snapshot: its state, stream start and progress. Per incremental snapshot (re-snapshots while the
workers stream): its range, state, rows, chunks, rate, exporter heartbeat, the open chunk and the shards that
passed its fence (they hold the chunk's newer records until it is emitted), and the hot keys it skipped.
With an end time (`bridge.end_time`, or passed in): per shard the commit time reached against it and whether it
passed (cdcbridge.bridge.end_time), like DescribeTunnel's progress.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from cdcbridge.bridge.end_time import shard_progress
from cdcbridge.changes import format_time_us, to_us
from cdcbridge.config import BridgeConfig
from cdcbridge.coordination.checkpoint.positions import SHARD_END, TRIM_HORIZON
from cdcbridge.coordination.leases.lease import (
    Lease,
)
from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore, lease_renew_times
from cdcbridge.publish.tables import source_client
from cdcbridge.publish.topic_record import TopicPartitionRecord
from cdcbridge.snapshot.incremental_state import ChunkState, IncrementalSnapshotStore
from cdcbridge.snapshot.key_bounds import describe_bound
from cdcbridge.snapshot.state import SnapshotStateStore
from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.errors import StreamError, TrimmedDataError

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
    #: Commit time of the last checkpointed record (ISO 8601), None before the first checkpoint.
    reached: str | None = None
    #: Against the end time, when there is one: "passed", or where the shard stands.
    end_time_state: str | None = None
    passed_end_time: bool | None = None
    #: lag_seconds (the age of the oldest unread record) / the stream's expiration: records are trimmed at 1.
    retention_used: float | None = None
    #: Records after the checkpoint are already trimmed: the shard halts (on_trimmed: stop) or lost them (continue).
    trimmed: bool = False


@dataclass
class TopicStatus:
    topic: str
    recorded_partitions: int | None
    actual_partitions: int | None


@dataclass
class SnapshotStatus:
    table: str
    state: str
    stream_start: str
    ranges: int | None
    ranges_done: int
    rows: int


@dataclass
class IncrementalSnapshotStatus:
    table: str
    snapshot_id: str
    state: str
    range: str
    rows: int
    chunks: int
    rows_per_second: float | None
    requested_by: str
    exporter: str
    heartbeat_seconds_ago: float | None
    #: "chunk 12 OPEN (fenced)" while a chunk is open, else "".
    open_chunk: str = ""
    #: Shards that hold records of the open chunk's keys committed after its fence, until it is emitted.
    held_shards: list[str] = field(default_factory=list)
    pending_keys: int = 0
    skipped_keys: list[str] = field(default_factory=list)
    error: str = ""


@dataclass
class ClusterStatus:
    shards: list[ShardStatus] = field(default_factory=list)
    topics: list[TopicStatus] = field(default_factory=list)
    snapshots: list[SnapshotStatus] = field(default_factory=list)
    incremental: list[IncrementalSnapshotStatus] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    end_time: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def owners(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for shard in self.shards:
            if shard.owner and not shard.finished:
                counts[shard.owner] = counts.get(shard.owner, 0) + 1
        return counts


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


def _expiration_seconds(streams: StreamClient, stream_id: str, table: str, status: ClusterStatus) -> float | None:
    try:
        return streams.describe_stream(stream_id, shard_limit=1).expiration_hours * 3600.0
    except StreamError as error:
        status.errors.append(f"table {table}: cannot read the stream's expiration: {error}")
        return None


def snapshot_status(store: SnapshotStateStore, stream_id: str, table: str) -> SnapshotStatus | None:
    record = store.read(stream_id, table)
    if record is None:
        return None
    ranges = store.read_ranges(stream_id)
    return SnapshotStatus(
        table=table, state=record.state.value, stream_start=format_time_us(record.start_us), ranges=record.ranges,
        ranges_done=sum(1 for progress in ranges if progress.done),
        rows=record.rows if record.finished_at_ms is not None else sum(progress.rows for progress in ranges),
    )  # fmt: skip


def incremental_status(store: IncrementalSnapshotStore, stream_id: str, table: str, now_ms: float
                       ) -> list[IncrementalSnapshotStatus]:  # fmt: skip
    """Every incremental snapshot of the table (finished ones too: they show what was skipped), oldest first."""
    found = []
    for snap in store.list_snapshots(stream_id, table):
        begin = describe_bound(snap.begin) if snap.begin is not None else "start"
        end = describe_bound(snap.end) if snap.end is not None else "end"
        chunk = store.read_chunk(stream_id, snap.snapshot_id) if snap.exporter_id else None
        open_chunk, held = "", []
        if chunk is not None and chunk.state is ChunkState.OPEN:
            open_chunk = f"chunk {chunk.number} OPEN ({'announced' if chunk.fence_us is None else 'fenced'})"
            reports = store.read_reports(stream_id, snap.snapshot_id, chunk.number)
            passed = sum(1 for report in reports if report.passed)
            open_chunk += f", {passed} shard(s) past its fence"
            held = sorted(report.shard_id for report in reports if report.holding)
        found.append(IncrementalSnapshotStatus(
            table=table, snapshot_id=snap.snapshot_id, state=snap.state.value, range=f"[{begin}, {end})",
            rows=snap.rows, chunks=snap.chunks, rows_per_second=snap.rows_per_second,
            requested_by=snap.requested_by.value, exporter=snap.exporter_id,
            heartbeat_seconds_ago=round(max(0.0, now_ms - snap.heartbeat_ms) / 1000, 1) if snap.exporter_id else None,
            open_chunk=open_chunk, held_shards=held, pending_keys=len(snap.pending_keys),
            skipped_keys=[describe_bound(key) for key in snap.skipped_keys], error=snap.error,
        ))  # fmt: skip
    return found


def collect_status(config: BridgeConfig, *, with_lag: bool = True, end_time: datetime | None = None) -> ClusterStatus:
    """`end_time` defaults to `bridge.end_time`; with one, each shard's progress towards it is read too."""
    source = config.source
    client = source_client(config)  # with the STS token too, when one is configured
    streams = StreamClient(client, check_crc=source.check_crc)
    store = TablestoreLeaseStore.from_settings(client, config.coordination)
    status = ClusterStatus()
    now_ms = time.time() * 1000
    end_time = end_time or config.bridge.end_time
    end_us = to_us(end_time) if end_time is not None else None
    status.end_time = format_time_us(end_us) if end_us is not None else None
    snapshots = SnapshotStateStore(client, config.coordination.status_table)
    incremental = IncrementalSnapshotStore(client, config.coordination.status_table)
    actual_counts: dict[str, int] = {}
    try:
        from cdcbridge.kafka.topics import TopicAdmin

        names = [
            t
            for table in source.tables
            for t in table.topics(prefix=config.kafka.topic_prefix, table=table.name).values()
        ]
        actual_counts = TopicAdmin(config.kafka.client_config(), timeout=5, quiet=True).partition_counts(names)
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
        snapshot = snapshot_status(snapshots, stream_id, table.name)
        if snapshot is not None:
            status.snapshots.append(snapshot)
        status.incremental += incremental_status(incremental, stream_id, table.name, now_ms)
        expiration_s = _expiration_seconds(streams, stream_id, table.name, status)
        renewed = lease_renew_times(client, config.coordination.status_table, stream_id)
        leases = store.list_leases(stream_id)
        status.errors += [str(error) for error in store.invalid_lease_rows(stream_id)]  # edited by hand, not read
        for lease in sorted(leases, key=lambda lease: lease.shard_id):
            lag: tuple[int | None, bool, float | None] = (None, False, None)
            trimmed = False
            if with_lag:
                try:
                    lag = _lag(streams, stream_id, lease, int(now_ms * 1000))
                except TrimmedDataError:
                    trimmed = True
                    status.errors.append(
                        f"shard {lease.shard_id} of table {table.name}: records after its checkpoint were trimmed by "
                        f"the stream's retention; with on_trimmed: {table.on_trimmed} it "
                        + {"stop": "halts: stop the workers, run `cdcbridge snapshot`, start them again",
                           "resnapshot": "requests an incremental snapshot of the table that repairs the loss and "
                           "continues after the gap"}.get(table.on_trimmed,
                                                          "continues after the gap (the loss is counted)")
                    )  # fmt: skip
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
                reached=format_time_us(lease.checkpoint_seq.sequence.timestamp_us) if lease.checkpoint_seq else None,
                retention_used=None if lag[2] is None or not expiration_s else round(lag[2] / expiration_s, 4),
                trimmed=trimmed,
            ))  # fmt: skip
            if end_us is not None:
                progress = shard_progress(
                    streams, table.name, stream_id, lease.shard_id, lease, end_us=end_us, now_us=int(now_ms * 1000),
                    grace_us=int(config.bridge.end_time_grace_seconds * 1_000_000),
                )  # fmt: skip
                status.shards[-1].end_time_state = progress.describe(end_us)
                status.shards[-1].passed_end_time = progress.passed
        topics = table.topics(prefix=config.kafka.topic_prefix, table=table.name).values()
        recorded = TopicPartitionRecord(client, config.coordination.status_table, stream_id).read(topics)
        status.topics += [TopicStatus(t, recorded.get(t), actual_counts.get(t)) for t in topics]
    return status


def render_text(status: ClusterStatus) -> str:
    header = (
        f"{'TABLE':<14} {'SHARD':<28} {'OWNER':<18} {'CHECKPOINT':<11} {'RENEWED':>8} {'LAG':>8} {'LAG_S':>7} "
        f"{'RETAIN':>7}"
        "  PARENTS / STEALER"
    )
    lines = [header]
    for s in status.shards:
        lag = "-" if s.lag_records is None else f"{s.lag_records}{'+' if s.lag_records_capped else ''}"
        renewed = "-" if s.renewed_seconds_ago is None else f"{s.renewed_seconds_ago:.1f}s"
        lag_s = "-" if s.lag_seconds is None else f"{s.lag_seconds:.1f}"
        retain = "TRIMMED" if s.trimmed else "-" if s.retention_used is None else f"{s.retention_used:.0%}"
        extra = ",".join(s.parents) or "-"
        if s.stealer:
            extra += f" / stealer {s.stealer}"
        lines.append(f"{s.table:<14} {s.shard_id:<28} {s.owner or '-':<18} {s.checkpoint:<11} {renewed:>8} "
                     f"{lag:>8} {lag_s:>7} {retain:>7}  {extra}")  # fmt: skip
    lines.append("")
    lines.append(f"{'TOPIC':<40} {'RECORDED':>9} {'ACTUAL':>7}")
    for t in status.topics:
        flag = (
            ""
            if t.actual_partitions in (None, t.recorded_partitions)
            else "  MISMATCH: the bridge will refuse to start"
        )
        lines.append(f"{t.topic:<40} {t.recorded_partitions or '-':>9} {t.actual_partitions or '-':>7}{flag}")
    if status.snapshots:
        lines.append("")
        lines.append(f"{'SNAPSHOT OF':<14} {'STATE':<8} {'STREAM START':<30} {'RANGES':>9} {'ROWS':>12}")
        for snap in status.snapshots:
            ranges = f"{snap.ranges_done}/{snap.ranges if snap.ranges is not None else '?'}"
            lines.append(f"{snap.table:<14} {snap.state:<8} {snap.stream_start:<30} {ranges:>9} {snap.rows:>12,}")
    if status.incremental:
        lines.append("")
        lines.append(f"{'INCREMENTAL SNAPSHOT':<26} {'TABLE':<14} {'STATE':<9} {'ROWS':>10} {'CHUNKS':>7} {'RATE':>8}"
                     "  RANGE / EXPORTER")  # fmt: skip
        for inc in status.incremental:
            rate = "-" if inc.rows_per_second is None else f"{inc.rows_per_second:,.0f}/s"
            exporter = (f"exporter {inc.exporter} ({inc.heartbeat_seconds_ago:.1f}s ago)" if inc.exporter
                        else f"requested by {inc.requested_by}, no exporter yet")  # fmt: skip
            lines.append(f"{inc.snapshot_id:<26} {inc.table:<14} {inc.state:<9} {inc.rows:>10,} {inc.chunks:>7} "
                         f"{rate:>8}  {inc.range} {exporter}")  # fmt: skip
            if inc.open_chunk:
                held = ", ".join(inc.held_shards) or "none"
                lines.append(f"{'':<26} {inc.open_chunk}; shards holding records after it: {held}")
            if inc.pending_keys:
                lines.append(f"{'':<26} {inc.pending_keys} changed key(s) to re-read")
            if inc.skipped_keys:
                lines.append(f"{'':<26} skipped hot keys: {', '.join(inc.skipped_keys[:10])}"
                             + (" ..." if len(inc.skipped_keys) > 10 else ""))  # fmt: skip
            if inc.error:
                lines.append(f"{'':<26} error: {inc.error}")
    if status.end_time is not None:
        passed = sum(1 for shard in status.shards if shard.passed_end_time)
        lines.append("")
        lines.append(f"END TIME {status.end_time}: {passed}/{len(status.shards)} shards passed")
        for shard in status.shards:
            lines.append(f"{shard.table:<14} {shard.shard_id:<28} {shard.end_time_state}")
    if status.owners:
        lines.append("")
        lines.append("active leases per worker: " + ", ".join(f"{w}={n}" for w, n in sorted(status.owners.items())))
    for error in status.errors:
        lines.append(f"warning: {error}")
    return "\n".join(lines)
