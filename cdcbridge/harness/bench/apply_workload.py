"""A realistic change workload for the apply job: source records, the source table they leave behind, and the
Kafka messages the bridge would publish for them (with deliberate redeliveries), produced through the registry.

Shared by the apply benchmark and the apply integration tests. The source table is modelled independently of
the apply fold (a dict per row, increments added, deletes remove the row), so "target equals source" checks the
whole path, not the fold against itself.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Value
from cdcbridge.changes import Sequence as RecordSequence
from cdcbridge.contract import (
    DEFAULT_TOPIC_SUFFIX,
    TOMBSTONE_SEQ_KEY_HEADER,
    TOPIC_CLEANUP_POLICY,
    CellOp,
    MessageFormat,
)
from cdcbridge.formats import BridgeTableFormat, build_table_messages, schema_text
from cdcbridge.kafka.schemas import TopicValueSerializers
from cdcbridge.kafka.sink import producer_config
from cdcbridge.kafka.topics import TopicAdmin, TopicSpec

START_US = 1_750_000_000_000_000

SourceRow = dict[str, Value]
SourceKey = tuple[str, tuple[Value, ...]]


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One Kafka message as the bridge sends it (value still a dict; None = tombstone)."""

    topic: str
    key: bytes
    value: dict | None
    headers: tuple[tuple[str, bytes], ...] = ()
    produced_ms: int | None = None


@dataclass
class SourceTable:
    """The source table as the records leave it (the oracle of the apply tests)."""

    name: str
    rows: dict[tuple[Value, ...], dict[str, tuple[Value, int | None]]] = field(default_factory=dict)

    def apply(self, record: ChangeRecord) -> None:
        pk = tuple(value for _, value in record.primary_key)
        if record.action is RecordAction.DELETE:
            self.rows.pop(pk, None)
            return
        row = {} if record.action is RecordAction.PUT else dict(self.rows.get(pk, {}))
        for cell in record.cells:
            version = cell.timestamp_ms if cell.timestamp_ms is not None else record.timestamp_ms
            if cell.op is CellOp.PUT:
                row[cell.name] = (cell.value, version)
            elif cell.op is CellOp.INCREMENT:
                held = row.get(cell.name, (0, None))[0]
                row[cell.name] = (held + cell.value, version)
            else:
                row.pop(cell.name, None)
        self.rows[pk] = row

    def current_row(self, record: ChangeRecord) -> dict[str, tuple[Value, int | None]] | None:
        return self.rows.get(tuple(value for _, value in record.primary_key))

    def live_values(self) -> dict[tuple[Value, ...], SourceRow]:
        """Live rows as pk values → {column: value}."""
        return {pk: {name: value for name, (value, _) in row.items()} for pk, row in self.rows.items()}


def generate_records(
    table: str,
    *,
    keys: int,
    records: int,
    seed: int = 0,
    start_us: int = START_US,
    increments: bool = True,
    preloaded: int = 0,
) -> list[ChangeRecord]:
    """Random PUT / UPDATE (puts, column deletes, increments) / DELETE records over `keys` rows, in commit order.

    Columns are typed consistently (``name`` string, ``score`` double, ``active`` bool, ``blob`` bytes,
    ``visits`` an integer counter that is only ever incremented or put), as a real table's columns are. Keys below
    `preloaded` exist before the first record (a table filled beforehand, e.g. by the bench's table generator), so
    their first records are updates and deletes as much as later ones.
    """
    rng = random.Random(seed)
    added: set[int] = set()
    removed: set[int] = set()
    out: list[ChangeRecord] = []
    for index in range(records):
        key = rng.randrange(keys)
        sequence = RecordSequence(1, start_us + index * 1000, 0)
        ts = sequence.timestamp_us // 1000
        pk: list[tuple[str, Value]] = [("region", f"r{key % 3}"), ("id", key)]
        roll = rng.random()
        live = key in added or (key < preloaded and key not in removed)
        if live and roll < 0.08:
            action, cells = RecordAction.DELETE, []
            added.discard(key)
            removed.add(key)
        elif not live or roll < 0.25:
            action = RecordAction.PUT
            cells = [
                Cell("name", CellOp.PUT, f"n{rng.randrange(10_000)}", ts),
                Cell("score", CellOp.PUT, rng.random() * 100, ts),
                Cell("visits", CellOp.PUT, rng.randrange(100), ts),
            ]
            if rng.random() < 0.5:
                cells.append(Cell("blob", CellOp.PUT, rng.randbytes(8), ts))
            added.add(key)
        else:
            action = RecordAction.UPDATE
            cells = []
            if increments and rng.random() < 0.6:
                cells.append(Cell("visits", CellOp.INCREMENT, rng.randrange(1, 10)))
            if rng.random() < 0.5:
                cells.append(Cell("active", CellOp.PUT, rng.random() < 0.5, ts))
            if rng.random() < 0.2:
                cells.append(Cell("blob", CellOp.DELETE_ALL_VERSION))
            if not cells:
                cells.append(Cell("name", CellOp.PUT, f"u{rng.randrange(10_000)}", ts))
        out.append(ChangeRecord(table, action, pk, cells, sequence, shard_id="shard-0"))
    return out


def bridge_messages(
    records: Iterable[ChangeRecord],
    table_format: BridgeTableFormat,
    *,
    topic_prefix: str,
    instance: str = "bench",
    source: SourceTable | None = None,
) -> tuple[list[OutgoingMessage], SourceTable]:
    """The messages the bridge publishes for `records` (update-lookup images read from the modelled source), and
    the source table after them. A tombstone carries its delete's seq_key in the TOMBSTONE_SEQ_KEY_HEADER header."""
    records = list(records)
    source = source or SourceTable(records[0].table if records else "")
    out: list[OutgoingMessage] = []
    for record in records:
        source.apply(record)
        current = source.current_row(record)
        for message in build_table_messages(
            record, table_format, instance=instance, topic_prefix=topic_prefix, current_row=current
        ):
            headers: tuple[tuple[str, bytes], ...] = ()
            if message.value is None:
                headers = ((TOMBSTONE_SEQ_KEY_HEADER, record.sequence.key(0).encode()),)
            out.append(OutgoingMessage(message.topic, message.key, message.value, headers))
    return out, source


def with_redeliveries(
    messages: Sequence[OutgoingMessage], *, seed: int = 0, fraction: float = 0.3, max_copies: int = 3
) -> list[OutgoingMessage]:
    """The stream with redeliveries, as a bridge restart makes them: runs of already-sent messages sent again
    (two or three times) later in the same partition order, so copies land in this and in later batches."""
    rng = random.Random(seed)
    out: list[OutgoingMessage] = []
    for index, message in enumerate(messages):
        out.append(message)
        if rng.random() < fraction / 8 and index > 0:
            start = rng.randrange(max(0, index - 20), index + 1)
            for _ in range(rng.randrange(1, max_copies)):
                out.extend(messages[start : index + 1])
    return out


def _cleanup_policy(topic: str) -> str:
    """The cleanup policy of the format whose default suffix ends `topic` (the bench uses default topic names)."""
    image = topic.endswith("." + DEFAULT_TOPIC_SUFFIX[MessageFormat.RECORD_IMAGE])
    return TOPIC_CLEANUP_POLICY[MessageFormat.RECORD_IMAGE if image else MessageFormat.MUTATE_LOG]


def ensure_topics(admin_config: Mapping[str, str], topics: Iterable[str], partitions: int) -> None:
    """Create the topics with the cleanup policy of their format (image topics compacted, as the bridge does)."""
    specs = [TopicSpec(topic, partitions, _cleanup_policy(topic)) for topic in set(topics)]
    admin = TopicAdmin(admin_config)
    for attempt in range(20):
        try:
            admin.ensure(specs, {})
            return
        except KeyError:  # TopicAdmin.ensure reads metadata that may not list a just-created topic yet
            if attempt == 19:
                raise
            time.sleep(0.25)


class WorkloadProducer:
    """Serializes through the registry (FULL_TRANSITIVE subjects, as the bridge registers them) and produces with
    the bridge's producer settings plus headers. `schemas` overrides a topic's writer schema (an evolved envelope).
    """

    def __init__(
        self,
        client_config: Mapping[str, str],
        registry_url: str,
        formats: Mapping[str, MessageFormat],
        *,
        schemas: Mapping[str, str] | None = None,
    ) -> None:
        chosen = {topic: (schemas or {}).get(topic) or schema_text(fmt) for topic, fmt in formats.items()}
        self.serializers = TopicValueSerializers(SchemaRegistryClient({"url": registry_url, "timeout": 10}), chosen)
        self.serializers.register_all()
        self.producer = Producer(producer_config(client_config))
        self.errors: list[str] = []

    def send(self, messages: Sequence[OutgoingMessage]) -> list[tuple[str, int, int] | None]:
        """Queue `messages`; the returned list fills with (topic, partition, offset) as Kafka acknowledges."""
        positions: list[tuple[str, int, int] | None] = [None] * len(messages)
        for index, message in enumerate(messages):

            def report(error: KafkaError | None, sent: Message, index: int = index) -> None:
                if error is not None:
                    self.errors.append(f"{sent.topic()}: {error.str()}")
                else:
                    positions[index] = (sent.topic(), sent.partition(), sent.offset())

            value = self.serializers.serialize(message.topic, message.value)
            while True:
                try:
                    self.producer.produce(
                        message.topic, key=message.key, value=value, headers=list(message.headers), on_delivery=report
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
        return positions

    def flush(self, timeout: float = 60.0) -> None:
        if self.producer.flush(timeout) != 0:
            raise RuntimeError(f"Kafka did not acknowledge every workload message within {timeout:.0f} s")
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} workload messages failed, first: {self.errors[:1]}")


def formats_of(messages: Iterable[OutgoingMessage]) -> dict[str, MessageFormat]:
    return {
        message.topic: (MessageFormat.MUTATE_LOG if "replace_row" in message.value else MessageFormat.RECORD_IMAGE)
        for message in messages
        if message.value is not None
    }


def produce_messages(
    client_config: Mapping[str, str],
    registry_url: str,
    messages: Sequence[OutgoingMessage],
    *,
    schemas: Mapping[str, str] | None = None,
) -> list[tuple[str, int, int]]:
    """Produce all `messages` and wait for Kafka; returns (topic, partition, offset) per message in send order."""
    producer = WorkloadProducer(client_config, registry_url, formats_of(messages), schemas=schemas)
    positions = producer.send(messages)
    producer.flush()
    if any(position is None for position in positions):
        raise RuntimeError("a workload message was not acknowledged")
    return [position for position in positions if position is not None]
