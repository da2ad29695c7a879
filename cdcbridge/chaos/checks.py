"""The end-of-run checks of the chaos suite, as pure functions over what was read back (tested without servers).

- At least once: every stream record's messages (one per unit operation, `seq_key` with its op index) are in Kafka
  under the record's key. A missing record is *lost*, or *lost by trim* when a trim removed it from the stream.
- Per-key order: in each partition, a key's messages, after dropping repeats of a `seq_key` already seen (a
  redelivery replays a suffix), come in increasing `seq_key` order; and a key lives in one partition only.
- Counters: the target's counter columns equal the source's (an increment applied twice would differ).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdcbridge.changes import ChangeRecord
from cdcbridge.formats.keys import record_key
from cdcbridge.formats.mutate_log import unit_operations


@dataclass(frozen=True, slots=True)
class SourceChange:
    """A stream record reduced to what the checks need: its key and the seq_keys of the messages it must become."""

    key: bytes
    shard_id: str
    sequence: str
    seq_keys: tuple[str, ...]
    #: A trim removed it from the stream (it was read back just before the trim).
    trimmed: bool = False

    @classmethod
    def from_record(cls, record: ChangeRecord, *, trimmed: bool = False) -> SourceChange:
        seq_keys = tuple(record.sequence.key(index) for index in range(len(unit_operations(record))))
        return cls(record_key(record), record.shard_id, record.sequence.to_text(), seq_keys, trimmed)


@dataclass(frozen=True, slots=True)
class KafkaMessage:
    """One message of the mutation topic: where it is, its key and its `seq.seq_key`."""

    partition: int
    offset: int
    key: bytes
    seq_key: str


@dataclass
class DeliveryCheck:
    """The at-least-once check: records and messages expected, and what is missing or unexplained."""

    records: int = 0
    expected_messages: int = 0
    missing: list[SourceChange] = field(default_factory=list)
    missing_trimmed: list[SourceChange] = field(default_factory=list)
    #: Messages in Kafka that no stream record explains (should be none).
    unexplained_messages: int = 0

    @property
    def lost(self) -> int:
        return len(self.missing)

    @property
    def lost_by_trim(self) -> int:
        return len(self.missing_trimmed)


def check_delivery(changes: Iterable[SourceChange], messages: Iterable[KafkaMessage]) -> DeliveryCheck:
    """Which source changes have a message missing in Kafka (each of a record's messages must be there once)."""
    delivered = {(message.key, message.seq_key) for message in messages}
    result = DeliveryCheck()
    expected: set[tuple[bytes, str]] = set()
    for change in changes:
        result.records += 1
        result.expected_messages += len(change.seq_keys)
        wanted = {(change.key, seq_key) for seq_key in change.seq_keys}
        expected |= wanted
        if not wanted <= delivered:
            (result.missing_trimmed if change.trimmed else result.missing).append(change)
    result.unexplained_messages = len(delivered - expected)
    return result


@dataclass(frozen=True, slots=True)
class OrderViolation:
    """A first occurrence of `seq_key` that came after the newer `after_seq_key` of the same key."""

    key: bytes
    partition: int
    offset: int
    seq_key: str
    after_seq_key: str

    def describe(self) -> str:
        return (
            f"key {self.key.decode(errors='replace')} partition {self.partition} offset {self.offset}: "
            f"{self.seq_key} after {self.after_seq_key}"
        )


@dataclass
class OrderCheck:
    keys: int = 0
    messages: int = 0
    #: Messages whose (key, seq_key) appeared before: redeliveries.
    duplicates: int = 0
    violations: list[OrderViolation] = field(default_factory=list)
    #: Keys found in more than one partition (their order across partitions is undefined).
    split_keys: list[bytes] = field(default_factory=list)


def check_key_order(messages: Iterable[KafkaMessage]) -> OrderCheck:
    """Per key, in partition offset order: the sequence of first occurrences of each seq_key is increasing."""
    by_partition: dict[int, list[KafkaMessage]] = defaultdict(list)
    for message in messages:
        by_partition[message.partition].append(message)
    result = OrderCheck()
    partitions_of: dict[bytes, set[int]] = defaultdict(set)
    seen: dict[bytes, set[str]] = defaultdict(set)
    newest: dict[bytes, str] = {}
    for partition, partition_messages in sorted(by_partition.items()):
        for message in sorted(partition_messages, key=lambda m: m.offset):
            result.messages += 1
            key = message.key
            partitions_of[key].add(partition)
            if message.seq_key in seen[key]:
                result.duplicates += 1
                continue
            seen[key].add(message.seq_key)
            latest = newest.get(key)
            if latest is not None and message.seq_key < latest:
                result.violations.append(OrderViolation(key, partition, message.offset, message.seq_key, latest))
            else:
                newest[key] = message.seq_key
    result.keys = len(partitions_of)
    result.split_keys = sorted(key for key, partitions in partitions_of.items() if len(partitions) > 1)
    return result


def counter_mismatches(
    source: Mapping[tuple, Mapping[str, Any]], target: Mapping[tuple, Mapping[str, Any]], counters: Iterable[str]
) -> list[str]:
    """Rows whose counter columns differ between source and target, one line each (missing rows included)."""
    columns = tuple(counters)
    lines = []
    for key in sorted(set(source) | set(target), key=str):
        expected = {c: (source.get(key) or {}).get(c) for c in columns}
        actual = {c: (target.get(key) or {}).get(c) for c in columns}
        if expected != actual:
            lines.append(f"{key}: source {expected}, target {actual}")
    return lines
