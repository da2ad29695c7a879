"""The local Kafka node formats and starts with any kept cluster id, including one that starts with "-" (written
before ids were drawn without it): the format command gets the id as one ``--cluster-id=`` argument."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient

from cdcbridge.harness.processes import free_port
from cdcbridge.harness.stack.kafka import start_kafka


def test_a_kept_cluster_id_starting_with_a_dash_formats_and_starts(tmp_path: Path) -> None:
    kept = "-" + "A" * 21
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "cluster.id").write_text(kept)
    port = free_port()
    record = start_kafka(tmp_path, "127.0.0.1", port, free_port())
    try:
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=30)
        assert metadata.cluster_id == kept
        assert f"cluster.id={kept}" in (tmp_path / "kafka" / "data" / "meta.properties").read_text()
    finally:
        record.stop(tmp_path)
