"""Column selection and masking on the real stack: the emulator, `cdcbridge snapshot` and a `cdcbridge run` worker
(processes, DEBUG logs), Kafka and Apicurio, and the apply job into Delta. Excluded values and the plain values of
masked columns must never appear in a Kafka message (read with confluent-kafka's AvroDeserializer), in the
processes' logs, or in the target; hashed values must join, redacted columns be named in a header."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.apply.job import run_apply
from cdcbridge.config import BridgeConfig, parse_config
from cdcbridge.contract import REDACTED_COLUMNS_HEADER
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.formats.columns import hash_value
from cdcbridge.formats.keys import decode_key
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.publish.errors import BridgeStartError
from cdcbridge.publish.tables import check_column_settings
from tests.integration.bridge.workers import CHECKOUT, end_offsets, write_config
from tests.integration.bridge_helpers import ReadMessage, create_stream_table, ots_client, read_topic

IGNORE = Condition(RowExistenceExpectation.IGNORE)
HASH_KEY = "integration-column-hash-key-7f3a"
#: Every plain value that must not leave the source contains this marker (case-insensitively).
MARKER = "secret"
COLUMNS = {"exclude": ["notes"], "mask": {"email": "hash", "ssn": "redact", "score": "hash"}}


def email(i: int) -> str:
    return f"user{i}@secret.example"


def put(ots: Any, i: int) -> None:
    cells = [("name", f"name-{i}"), ("email", email(i)), ("ssn", f"SSN-SECRET-{i}"), ("notes", f"notes-secret-{i}"),
             ("score", 1000 + i)]  # fmt: skip
    ots.put_row("people", Row([("id", i)], cells), IGNORE)


@dataclass
class Replicated:
    config: BridgeConfig
    images: list[ReadMessage]
    mutations: list[ReadMessage]
    logs: str


@pytest.fixture(scope="module")
def replicated(stack: StackEndpoints, emulator: EmulatorServer, tmp_path_factory: pytest.TempPathFactory) -> Replicated:
    """Rows 1-3 exported by a snapshot, then streamed by a worker: a new row 4, an update of row 1, an increment
    of row 2's masked score, and the delete of row 3."""
    tmp_path = tmp_path_factory.mktemp("masking")
    ots = ots_client(emulator.url)
    create_stream_table(ots, "people", [("id", "INTEGER")])
    for i in (1, 2, 3):
        put(ots, i)
    (tmp_path / "hash.key").write_text(HASH_KEY + "\n")
    config_path = tmp_path / "bridge.yaml"
    table = {"name": "people", "formats": ["RECORD_IMAGE", "MUTATE_LOG"], "partitions": 2, "columns": COLUMNS}
    data = write_config(config_path, stack, emulator.url, [table])
    data["source"]["column_hash_key"] = f"${{file:{tmp_path / 'hash.key'}}}"
    data["observability"]["log_level"] = "DEBUG"
    data["snapshot"] = {"clock_skew_margin_seconds": 0.2}
    data["apply"] = {"delta_path": str(tmp_path / "delta"), "checkpoint_location": str(tmp_path / "checkpoint"),
                     "app_id": "masking-test"}  # fmt: skip
    config_path.write_text(yaml.safe_dump(data))
    config = parse_config(data, environ={})

    with (tmp_path / "snapshot.log").open("wb") as log:
        snapshot = subprocess.run([sys.executable, "-m", "cdcbridge", "snapshot", "--config", str(config_path)],
                                  cwd=CHECKOUT, stdout=log, stderr=subprocess.STDOUT, timeout=300)  # fmt: skip
    logs = (tmp_path / "snapshot.log").read_text(errors="replace")
    assert snapshot.returncode == 0, logs[-4000:]
    worker = BridgeWorkerProcess(config_path, "mask-1", tmp_path / "worker.log").start()
    try:
        put(ots, 4)
        ots.update_row("people", Row([("id", 1)], {"put": [("email", email(11)), ("ssn", "SSN-SECRET-11"),
                                                           ("notes", "notes-secret-11")]}), IGNORE)  # fmt: skip
        ots.update_row("people", Row([("id", 2)], {"increment": [("score", 5)]}), IGNORE)
        ots.delete_row("people", Row([("id", 3)]), IGNORE)
        prefix = config.kafka.topic_prefix
        # 3 snapshot images, then put 4, update 1, increment 2, delete 3 (+ tombstone); one mutation per change.
        images = read_topic(stack, f"{prefix}.people.image", until=lambda read: len(read) >= 8, timeout=180)
        mutations = read_topic(stack, f"{prefix}.people.mutation", until=lambda read: len(read) >= 7, timeout=60)
    finally:
        worker.stop()
    return Replicated(config, images, mutations, logs + worker.log())


def _clean(value: Any) -> bool:
    return MARKER not in repr(value).lower()


def test_excluded_and_plain_masked_values_never_reach_kafka_or_the_logs(
    replicated: Replicated, stack: StackEndpoints
) -> None:
    messages = replicated.images + replicated.mutations
    assert all(_clean(m.value) and _clean(m.key) for m in messages)
    assert all(_clean(m.headers) for m in messages)
    for topic in {m.topic for m in messages}:  # nothing else is on the topics
        assert sum(end_offsets(stack.kafka_bootstrap, topic).values()) == sum(m.topic == topic for m in messages)
    assert MARKER not in replicated.logs.lower(), replicated.logs[-3000:]
    assert HASH_KEY not in replicated.logs
    assert "DEBUG" in replicated.logs  # the worker did log at the most verbose level
    assert all(m.headers.get(REDACTED_COLUMNS_HEADER) == b"ssn" for m in messages)


def test_hashed_values_join_and_redacted_and_excluded_columns_are_absent(replicated: Replicated) -> None:
    key = HASH_KEY.encode()
    last: dict[int, dict[str, Any] | None] = {}
    for message in replicated.images:
        (row_id,) = decode_key(message.key)
        value = message.value
        last[row_id] = None if value is None or value["row_deleted"] else {
            name: cell["value"] for name, cell in value["columns"].items()}  # fmt: skip
    expected_score = {1: 1001, 2: 1007, 4: 1004}  # row 2's image: the row read back after its increment
    for row_id in (1, 2, 4):
        row = last[row_id]
        assert row is not None
        assert row["email"] == hash_value(key, email(11 if row_id == 1 else row_id))  # joins on the same HMAC
        assert row["score"] == hash_value(key, expected_score[row_id])
        assert "ssn" not in row and "notes" not in row
    assert last[3] is None
    updates = {m.value["pk"][0]["value"]: m.value["cells"] for m in replicated.mutations if m.value["type"] == "UPDATE"}
    assert [(c["name"], c["op"], c["value"]) for c in updates[1]] == [
        ("email", "PUT", hash_value(key, email(11))), ("ssn", "DELETE_ALL_VERSION", None)]  # fmt: skip
    # The emulator logs this increment as a delta: a masked column's delta is redacted, never hashed or sent.
    assert [(c["name"], c["op"], c["amount"]) for c in updates[2]] == [("score", "DELETE_ALL_VERSION", None)]


def test_a_primary_key_column_in_the_settings_stops_the_start(replicated: Replicated, emulator: EmulatorServer) -> None:
    data = replicated.config.model_dump(mode="json")
    data["source"]["tables"][0]["columns"] = {"mask": {"id": "hash"}}
    data["source"]["column_hash_key"] = HASH_KEY
    with pytest.raises(BridgeStartError, match="column id is part of the primary key and cannot be masked"):
        check_column_settings(parse_config(data, environ={}), ots_client(emulator.url), "people")


def test_the_apply_job_target_holds_only_masked_values(replicated: Replicated, spark: Any) -> None:
    run_apply(replicated.config, once=True, spark=spark)
    frame = spark.read.format("delta").load(str(Path(replicated.config.apply.delta_path) / "people"))
    rows = {row["id"]: row.asDict() for row in frame.where("NOT _deleted").collect()}
    assert sorted(rows) == [1, 2, 4]
    assert all(_clean(row) for row in rows.values())
    assert rows[4]["email"] == hash_value(HASH_KEY.encode(), email(4))
    assert rows[1]["email"] == hash_value(HASH_KEY.encode(), email(11))
    assert all(row.get("ssn") is None and row.get("notes") is None for row in rows.values())
