"""Bridge workers as real processes (`python -m cdcbridge run`), and what the tests observe of them: their log,
the lease rows they write, the Kafka offsets they leave behind."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import fastavro
import yaml
from confluent_kafka import Consumer, TopicPartition
from tablestore import OTSClient

from cdcbridge.contract import MessageFormat
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore
from cdcbridge.formats.schemas import parsed_schema
from cdcbridge.harness.stack.stack import StackEndpoints
from tests.integration.bridge_helpers import (
    ACCESS_KEY_ID,
    ACCESS_KEY_SECRET,
    FAST_COORDINATION,
    INSTANCE,
    ReadMessage,
)

T = TypeVar("T")
CHECKOUT = Path(__file__).resolve().parents[3]


def write_config(
    path: Path, stack: StackEndpoints, emulator_url: str, tables: list[dict[str, Any]], *,
    registry_url: str | None = None, coordination: dict[str, Any] | None = None,
    producer: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Write a `cdcbridge run` YAML config with fresh topic prefix and status table; returns the data written."""
    suffix = uuid.uuid4().hex[:8]
    data = {
        "source": {
            "endpoint": emulator_url, "instance": INSTANCE, "access_key_id": ACCESS_KEY_ID,
            "access_key_secret": ACCESS_KEY_SECRET, "tables": tables,
        },
        "coordination": {**FAST_COORDINATION, "status_table": f"status_{suffix}", **(coordination or {})},
        "kafka": {
            "bootstrap_servers": stack.kafka_bootstrap, "topic_prefix": f"p{suffix}",
            "schema_registry": {"url": registry_url or stack.registry_url}, "producer": producer or {},
        },
        "observability": {"log_level": "INFO"},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(data))
    return data


@dataclass
class WorkerProcess:
    """One `cdcbridge run` process; its stdout and stderr go to `log_path`."""

    config_path: Path
    worker_id: str
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> WorkerProcess:
        command = [sys.executable, "-m", "cdcbridge", "run", "--config", str(self.config_path),
                   "--worker-id", self.worker_id]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, cwd=CHECKOUT, stdout=log, stderr=subprocess.STDOUT,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """kill -9: no drain, no checkpoint, no release."""
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM (drain, checkpoint, release), then SIGKILL if it does not end in time."""
        if not self.alive:
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for_log(self, pattern: str, *, count: int = 1, timeout: float = 90) -> list[re.Match[str]]:
        """The first `count` matches of `pattern` in the log, waiting for them (the worker must stay alive)."""

        def found() -> list[re.Match[str]] | None:
            matches = list(re.finditer(pattern, self.log()))
            if len(matches) >= count:
                return matches
            assert self.alive, f"worker {self.worker_id} exited; log:\n{self.log()[-4000:]}"
            return None

        return wait_until(found, timeout, f"{count}× /{pattern}/ in the log of {self.worker_id}", self.log)


def wait_until(probe: Callable[[], T | None], timeout: float, what: str, context: Callable[[], str] | None = None) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` (and `context()`) after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            detail = f"\n{context()[-4000:]}" if context is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(0.2)


def leases(ots: OTSClient, status_table: str, stream_id: str) -> list[Lease]:
    """The lease rows of a stream as the workers left them (empty if the status table does not exist yet)."""
    if status_table not in ots.list_table():
        return []
    return TablestoreLeaseStore(ots, status_table).list_leases(stream_id)


def read_messages(
    stack: StackEndpoints, topic: str, *, until: Callable[[list[ReadMessage]], bool], timeout: float = 120
) -> list[ReadMessage]:
    """Every message of `topic` from the beginning once `until(messages)` holds (or fail at timeout).

    Values are decoded with our own schema (the registered one): reading needs no registry call, so a slow or
    stuck registry cannot hang the test. Tombstones stay None; the Confluent framing is checked.
    """
    schema = parsed_schema(MessageFormat.RECORD_IMAGE if topic.endswith(".image") else MessageFormat.MUTATE_LOG)
    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"read-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        messages: list[ReadMessage] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if until(messages):
                    return messages
                continue
            assert msg.error() is None, msg.error()
            raw = msg.value()
            value = None
            if raw is not None:
                assert raw[:1] == b"\x00", f"not Confluent-framed: {raw[:8]!r}"
                value = fastavro.schemaless_reader(io.BytesIO(raw[5:]), schema, return_named_type=False)
            messages.append(ReadMessage(msg.topic(), msg.partition(), msg.offset(), msg.key(), value,
                                        dict(msg.headers() or [])))  # fmt: skip
        raise AssertionError(f"timed out reading {topic}: {len(messages)} messages so far")
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition → next offset (high watermark) of `topic`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"offsets-{uuid.uuid4().hex}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in metadata.partitions
        }
    finally:
        consumer.close()
