"""The running pieces of a chaos run, as the fault injectors and the recovery probe see them.

Local stack (Kafka, Apicurio, the emulator recording increments as deltas) as processes, the registry behind a
TCP proxy the harness can close, the source table with its stream, the bridge workers, the stream ledger.

The table is published in both formats, so one run puts both topics under the same faults: RECORD_IMAGE (with its
update-lookup reads and tombstones) and MUTATE_LOG. The apply job reads the MUTATE_LOG topic (`prefer_format`),
the one that carries every operation; the image topic is checked against the source directly.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cdcbridge.config import BridgeConfig
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore
from cdcbridge.harness.chaos.ledger import StreamLedger
from cdcbridge.harness.chaos.load import PRIMARY_KEY
from cdcbridge.harness.chaos.tcp_proxy import TcpProxy
from cdcbridge.harness.chaos.workers import WorkerPool
from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.harness.stack.stack import LocalStack, StackEndpoints

TABLE = "chaos_accounts"
INSTANCE = "cdcbridge"
ACCESS_KEY_ID = "emulator-id"
ACCESS_KEY_SECRET = "emulator-secret"
PARTITIONS = 4

#: Lease timings of the run: short, so a fault cycle takes seconds, but with room for a busy 2-core machine.
COORDINATION = {
    "lease_duration_seconds": 6.0,
    "renew_interval_seconds": 1.5,
    "take_interval_seconds": 1.5,
    "shard_sync_interval_seconds": 1.5,
    "parent_poll_interval_seconds": 0.5,
    "handoff_timeout_seconds": 8.0,
    "no_progress_abort_seconds": 60.0,
    "idle_fetch_interval_seconds": 0.1,
}


def write_chaos_config(work_dir: Path, endpoints: StackEndpoints, registry_url: str) -> Path:
    """The bridge + apply configuration of the run (one file: the workers and the apply job read the same)."""
    assert endpoints.emulator_url is not None
    config = {
        "source": {
            "endpoint": endpoints.emulator_url,
            "instance": INSTANCE,
            "access_key_id": ACCESS_KEY_ID,
            "access_key_secret": ACCESS_KEY_SECRET,
            # on_trimmed: resnapshot (the default): a trim of unread records would be repaired by an incremental
            # snapshot the workers request and run, so "lost by trim" must be 0.
            "tables": [
                {
                    "name": TABLE,
                    "formats": ["RECORD_IMAGE", "MUTATE_LOG"],
                    "partitions": PARTITIONS,
                    "tombstones": True,
                    "on_trimmed": "resnapshot",
                }
            ],
        },
        "coordination": {"status_table": f"chaos_status_{uuid.uuid4().hex[:8]}", **COORDINATION},
        "kafka": {
            "bootstrap_servers": endpoints.kafka_bootstrap,
            "topic_prefix": "chaos",
            "schema_registry": {"url": registry_url},
        },
        "apply": {
            "target": "delta",
            "delta_path": str(work_dir / "delta"),
            "checkpoint_location": str(work_dir / "apply-checkpoint"),
            "trigger_seconds": 10.0,
            "prefer_format": "MUTATE_LOG",
        },
        "observability": {"log_level": "INFO"},
        # Small chunks and short timings, so the incremental_snapshot fault has several chunks over the chaos
        # table's rows and a killed exporter is taken over within seconds.
        "snapshot": {
            "incremental": {
                "chunk_rows": 50,
                "fence_refresh_seconds": 0.5,
                "clock_skew_margin_seconds": 0.2,
                "exporter_timeout_seconds": 6.0,
            }
        },
    }
    path = work_dir / "cdcbridge.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def create_source_table(streams: Any, admin: EmulatorAdmin, shards: int) -> str:
    """The chaos table, split until `shards` shards are open; returns the stream id."""
    stream_id, _ = admin.create_sharded_table(streams, TABLE, list(PRIMARY_KEY), shards)
    return stream_id


@dataclass
class ChaosEnvironment:
    work_dir: Path
    stack: LocalStack
    endpoints: StackEndpoints
    registry_proxy: TcpProxy
    ots: Any
    streams: Any
    stream_id: str
    config_path: Path
    config: BridgeConfig
    pool: WorkerPool
    ledger: StreamLedger

    @property
    def emulator_url(self) -> str:
        assert self.endpoints.emulator_url is not None
        return self.endpoints.emulator_url

    @property
    def admin(self) -> EmulatorAdmin:
        return EmulatorAdmin(self.emulator_url)

    @property
    def table(self) -> str:
        return TABLE

    @property
    def mutation_topic(self) -> str:
        return f"chaos.{TABLE}.mutation"

    @property
    def image_topic(self) -> str:
        return f"chaos.{TABLE}.image"

    @property
    def lease_duration(self) -> float:
        return float(COORDINATION["lease_duration_seconds"])

    def leases(self) -> dict[str, Lease]:
        """Shard id → lease row (empty before the first worker created the status table)."""
        status_table = self.config.coordination.status_table
        if status_table not in self.ots.list_table():
            return {}
        store = TablestoreLeaseStore(self.ots, status_table)
        return {lease.shard_id: lease for lease in store.list_leases(self.stream_id)}

    def shards(self) -> list[Any]:
        return self.streams.list_all_shards(self.stream_id)

    def open_shard_ids(self) -> list[str]:
        """Shards no other shard names as a parent: the ones still written to."""
        shards = self.shards()
        parents = {p for s in shards for p in (s.parent_id, s.parent_sibling_id) if p}
        return sorted(s.shard_id for s in shards if s.shard_id not in parents)
