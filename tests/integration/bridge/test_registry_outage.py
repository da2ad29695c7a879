"""A registry that is unreachable when the worker starts: clear retry lines, no checkpoint, then full delivery."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.changes import Sequence
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.formats.keys import decode_key
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from tests.integration.bridge.tcp_proxy import TcpProxy
from tests.integration.bridge.workers import end_offsets, leases, read_messages, wait_until, write_config
from tests.integration.bridge_helpers import create_stream_table, ots_client

IGNORE = Condition(RowExistenceExpectation.IGNORE)


def test_a_registry_outage_at_start_is_retried_and_then_everything_is_delivered(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, "outage", [("id", "INTEGER")])
    for i in range(20):
        ots.put_row("outage", Row([("id", i)], [("n", i)]), IGNORE)
    registry = urlsplit(stack.registry_url)
    assert registry.hostname and registry.port
    with TcpProxy(registry.hostname, registry.port) as proxy:
        proxied_url = stack.registry_url.replace(f":{registry.port}/", f":{proxy.port}/", 1)
        config = write_config(
            tmp_path / "bridge.yaml", stack, emulator.url, [{"name": "outage", "partitions": 2}],
            registry_url=proxied_url,
        )  # fmt: skip
        status_table = config["coordination"]["status_table"]
        topic = f"{config['kafka']['topic_prefix']}.outage.mutation"
        worker = BridgeWorkerProcess(tmp_path / "bridge.yaml", "w1", tmp_path / "w1.log").start()
        try:
            retries = worker.wait_for_log(r"registering value schemas: (.*); retrying in (\d+)s", count=2)
            # The line names the subject, the cause and what to check; the delay backs off.
            assert f"subject {topic}-value" in retries[0].group(1)
            assert "did not answer" in retries[0].group(1) and "that the registry runs" in retries[0].group(1)
            assert int(retries[1].group(2)) > int(retries[0].group(2))
            assert proxy.refused >= 2
            # While the registry is away nothing is produced and no checkpoint exists.
            assert sum(end_offsets(stack.kafka_bootstrap, topic).values()) == 0
            assert [lease for lease in leases(ots, status_table, stream_id) if lease.checkpoint_seq] == []

            proxy.open()
            for i in range(20, 30):
                ots.put_row("outage", Row([("id", i)], [("n", i)]), IGNORE)
            messages = read_messages(stack, topic, until=lambda m: len(m) >= 30, timeout=120)
            assert sorted(decode_key(m.key)[0] for m in messages) == list(range(30))  # each exactly once
            last = max(Sequence.from_text(_seq_text(m.value["seq"])) for m in messages)

            def checkpointed() -> bool:
                return any(
                    lease.checkpoint_seq is not None and lease.checkpoint_seq >= ExtendedSequence(last)
                    for lease in leases(ots, status_table, stream_id)
                )

            wait_until(checkpointed, 60, "the checkpoint to reach the last record", worker.log)
            assert "Traceback" not in worker.log()
        finally:
            worker.stop()


def _seq_text(seq: dict) -> str:
    return f"{seq['epoch']}:{seq['timestamp_us']}:{seq['row_index']}"
