"""The end-of-run checks of the chaos suite, as pure functions over what was read back (tested without servers).

MUTATE_LOG topic:

- At least once: every stream record's messages (one per unit operation, `seq_key` with its op index) are in Kafka
  under the record's key. A missing record is *lost*, or *lost by trim* when a trim removed it from the stream.
- Per-key order: in each partition, a key's messages, after dropping repeats of a `seq_key` already seen (a
  redelivery replays a suffix), come in increasing `seq_key` order; and a key lives in one partition only.
- Counters: the target's counter columns equal the source's (an increment applied twice would differ).

RECORD_IMAGE topic (the same two rules over each message's *image position*: its `seq_key`, which always has op
index 0, and for the tombstone after a row delete, that delete's `seq_key` from its seq-key header
(contract.TOMBSTONE_SEQ_KEY_HEADER), placed right after the delete's image):

- At least once: every stream record has its image under its key, and a DELETE record its tombstone too.
- Per-key order: as for MUTATE_LOG, over image positions.
- Final state: per key, the last image (highest position) equals the source's final row, every column compared
  (counters included: an image carries the row read back, so increments show as values); a tombstone or a
  `row_deleted` image means the row is gone. Only the *last* image must equal the source: an UPDATE's image is the
  row read back when the bridge processed it (update-lookup), which may already show later changes. A `partial`
  image (the row was gone at lookup) must be followed by a delete on its key, so it is never the last one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cdcbridge.changes import ChangeRecord, RecordAction, Sequence
from cdcbridge.formats.keys import decode_key, record_key
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
    #: A DELETE record: its image is `row_deleted` and a tombstone follows it.
    row_deleted: bool = False

    @classmethod
    def from_record(cls, record: ChangeRecord, *, trimmed: bool = False) -> SourceChange:
        seq_keys = tuple(record.sequence.key(index) for index in range(len(unit_operations(record))))
        deleted = record.action is RecordAction.DELETE
        return cls(record_key(record), record.shard_id, record.sequence.to_text(), seq_keys, trimmed, deleted)


@dataclass(frozen=True, slots=True)
class KafkaMessage:
    """One message of the mutation topic: where it is, its key and its `seq.seq_key`."""

    partition: int
    offset: int
    key: bytes
    seq_key: str
    #: Sent by an incremental snapshot (`source.shard_id` = snapshot): no stream record explains it, the order and
    #: final-state rules cover it.
    snapshot: bool = False


@dataclass
class DeliveryCheck:
    """The at-least-once check: records and messages expected, and what is missing or unexplained."""

    records: int = 0
    expected_messages: int = 0
    missing: list[SourceChange] = field(default_factory=list)
    missing_trimmed: list[SourceChange] = field(default_factory=list)
    #: Messages in Kafka that no stream record explains (should be none; incremental snapshot messages aside).
    unexplained_messages: int = 0
    #: Messages an incremental snapshot sent (distinct key and seq_key).
    snapshot_messages: int = 0

    @property
    def lost(self) -> int:
        return len(self.missing)

    @property
    def lost_by_trim(self) -> int:
        return len(self.missing_trimmed)


def check_delivery(changes: Iterable[SourceChange], messages: Iterable[KafkaMessage]) -> DeliveryCheck:
    """Which source changes have a message missing in Kafka (each of a record's messages must be there once).
    Incremental snapshot messages explain no stream record and need none."""
    delivered: set[tuple[bytes, str]] = set()
    snapshot: set[tuple[bytes, str]] = set()
    for message in messages:
        (snapshot if message.snapshot else delivered).add((message.key, message.seq_key))
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
    result.snapshot_messages = len(snapshot)
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


# -- RECORD_IMAGE topic ---------------------------------------------------------------------------------------------

#: Appended to a delete's seq_key to give its tombstone's image position: the fixed-width seq_keys decide every
#: comparison before the suffix does, so the tombstone sorts right after its own image and before any later record.
TOMBSTONE_SUFFIX = "+tombstone"


@dataclass(frozen=True, slots=True)
class ImageMessage:
    """One message of the image topic: a RECORD_IMAGE value, or the tombstone (null value) after a row delete."""

    partition: int
    offset: int
    key: bytes
    #: The image's `seq.seq_key`; for a tombstone its seq-key header ("" when the header is missing,
    #: which no source change explains).
    seq_key: str
    tombstone: bool = False
    row_deleted: bool = False
    partial: bool = False
    #: Column name → value (what a reader of the image sees; the versions are not compared).
    columns: Mapping[str, Any] = field(default_factory=dict)
    #: An incremental snapshot's image (see KafkaMessage.snapshot).
    snapshot: bool = False

    @property
    def position(self) -> str:
        """Where the message sorts among its key's image messages (a tombstone right after its delete's image)."""
        return self.seq_key + TOMBSTONE_SUFFIX if self.tombstone else self.seq_key

    @property
    def removes_row(self) -> bool:
        return self.tombstone or self.row_deleted

    def ordered(self) -> KafkaMessage:
        """The message as the MUTATE_LOG rules see one: its place, its key and its position as the seq_key."""
        return KafkaMessage(self.partition, self.offset, self.key, self.position, self.snapshot)


def image_expectation(change: SourceChange, *, tombstones: bool = True) -> SourceChange:
    """The image positions a source change must appear at: its image (record seq, op index 0) and, for a row
    delete with tombstones on, the tombstone after it."""
    image = Sequence.from_text(change.sequence).key(0)
    positions = (image, image + TOMBSTONE_SUFFIX) if change.row_deleted and tombstones else (image,)
    return replace(change, seq_keys=positions)


def check_image_delivery(
    changes: Iterable[SourceChange], images: Iterable[ImageMessage], *, tombstones: bool = True
) -> DeliveryCheck:
    """:func:`check_delivery` on the image topic: a change with its image or its tombstone missing is lost;
    redeliveries are allowed; an image or tombstone no change explains is unexplained."""
    expected = (image_expectation(change, tombstones=tombstones) for change in changes)
    return check_delivery(expected, (image.ordered() for image in images))


def check_image_order(images: Iterable[ImageMessage]) -> OrderCheck:
    """:func:`check_key_order` over image positions: per partition and key, in offset order, after dropping
    repeats of a position already seen (a redelivered run), positions only increase."""
    return check_key_order(image.ordered() for image in images)


@dataclass
class ImageStateCheck:
    """The final-state check of the image topic: the last image per key against the source's final rows."""

    #: Keys with at least one image message.
    keys: int = 0
    rows_source: int = 0
    #: Keys whose last image is a live row (not removed, not partial).
    rows_image: int = 0
    partial_images: int = 0
    tombstones: int = 0
    #: One line per key whose last image differs from its source row (a row on one side only included).
    mismatches: list[str] = field(default_factory=list)
    #: One line per key whose counter columns differ (a subset of `mismatches`, reported on its own).
    counter_mismatches: list[str] = field(default_factory=list)
    #: Partial images (key and seq_key) with no row delete at a later position on their key.
    partial_without_delete: list[str] = field(default_factory=list)


def last_images(images: Iterable[ImageMessage]) -> dict[bytes, ImageMessage]:
    """Per key, the message at the highest image position (of its redeliveries, the one at the highest offset)."""
    last: dict[bytes, ImageMessage] = {}
    for image in images:
        held = last.get(image.key)
        if held is None or (image.position, image.offset) > (held.position, held.offset):
            last[image.key] = image
    return last


def check_image_state(
    images: Iterable[ImageMessage], source: Mapping[tuple, Mapping[str, Any]], counters: Iterable[str] = ()
) -> ImageStateCheck:
    """Compare the last image of every key with `source` (primary-key values → columns, the table read back at
    the end): a removed or absent last image ⇔ no source row; a live one ⇔ the same columns and values. A last image
    that is partial never matches (the delete that must follow it is missing)."""
    messages = list(images)
    result = ImageStateCheck(rows_source=len(source))
    latest_removal: dict[bytes, str] = {}
    for image in messages:
        result.partial_images += image.partial
        result.tombstones += image.tombstone
        if image.removes_row and image.position > latest_removal.get(image.key, ""):
            latest_removal[image.key] = image.position
    unfollowed = {
        (image.key, image.seq_key)
        for image in messages
        if image.partial and latest_removal.get(image.key, "") <= image.position
    }
    result.partial_without_delete = [f"{key.decode(errors='replace')} {seq_key}" for key, seq_key in sorted(unfollowed)]

    last = last_images(messages)
    result.keys = len(last)
    final: dict[tuple, Mapping[str, Any] | str | None] = {}
    for key, image in last.items():
        row_key = tuple(decode_key(key))
        if image.removes_row:
            final[row_key] = None
        elif image.partial:
            final[row_key] = f"partial image {image.seq_key}"
        else:
            final[row_key] = dict(image.columns)
    live = {key: row for key, row in final.items() if isinstance(row, dict)}
    result.rows_image = len(live)
    for key in sorted(set(source) | set(final), key=str):
        expected = dict(source[key]) if key in source else None
        actual = final.get(key)
        if expected != actual:
            shown = "no image" if key not in final else actual
            result.mismatches.append(f"{key}: source {expected}, last image {shown}")
    result.counter_mismatches = counter_mismatches(source, live, counters)
    return result
