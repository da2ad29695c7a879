"""The checks every incremental-snapshot test ends with: the last RECORD_IMAGE per key is the source row, and per
key the seq never goes back in partition order (redeliveries aside)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from cdcbridge.formats.keys import decode_key
from cdcbridge.harness.stack.stack import StackEndpoints
from tests.integration.bridge.workers import end_offsets
from tests.integration.bridge_helpers import ReadMessage, read_topic


def all_messages(stack: StackEndpoints, topic: str) -> list[ReadMessage]:
    total = sum(end_offsets(stack.kafka_bootstrap, topic).values())
    return read_topic(stack, topic, until=lambda read: len(read) >= total, timeout=90)


def _plain(value: Any) -> Any:
    return value[1] if isinstance(value, tuple) else value


def assert_last_images_are_the_source(images: list[ReadMessage], source: dict[tuple, dict[str, Any]]) -> None:
    last: dict[tuple, dict[str, Any] | None] = {}
    for message in sorted(images, key=lambda m: (m.partition, m.offset)):
        value = message.value
        pk = tuple(decode_key(message.key))
        live = value is not None and not value["row_deleted"]
        last[pk] = {name: _plain(cell["value"]) for name, cell in value["columns"].items()} if live else None
    compacted = {pk: row for pk, row in last.items() if row is not None}
    wrong = [pk for pk in set(source) | set(compacted) if source.get(pk) != compacted.get(pk)]
    assert not wrong, [(pk, source.get(pk), compacted.get(pk)) for pk in sorted(wrong)[:5]]


def assert_seq_never_regresses(messages: list[ReadMessage]) -> None:
    newest: dict[bytes, str] = {}
    seen: dict[bytes, set[str]] = defaultdict(set)
    for message in sorted(messages, key=lambda m: (m.partition, m.offset)):
        if message.value is None:
            continue
        seq = message.value["seq"]["seq_key"]
        regressed = message.key in newest and seq < newest[message.key] and seq not in seen[message.key]
        assert not regressed, (decode_key(message.key), seq, newest[message.key])
        newest[message.key] = max(seq, newest.get(message.key, seq))
        seen[message.key].add(seq)
