"""The Kafka message contract (DESIGN §6) in one place: what the bridge writes and the apply job reads.

Formats, mutation types, cell ops, the seq_key layout, header names and default topic names live here and only
here; every Python module imports them from this one. Changing a value changes the wire, so every enum value is
fixed. The C encoders (cdcbridge/formats/_envelope_speedups.c) and the Spark kernel
(deploy/spark/src/main/java/io/cdcbridge/spark/) keep their own copies of the constants they need;
tests/unit/test_contract.py reads those sources and fails when a copy differs from this module.
"""

from __future__ import annotations

import re
from enum import StrEnum


class MessageFormat(StrEnum):
    """The two message formats; their order here is the order a record's messages are numbered in."""

    RECORD_IMAGE = "RECORD_IMAGE"
    MUTATE_LOG = "MUTATE_LOG"


class MutationType(StrEnum):
    """The ``type`` of a MUTATE_LOG message, in the order of schemas/mutate_log.avsc's symbols (the schema adds
    UNKNOWN as the reader's default)."""

    PUT = "PUT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    INCREMENT = "INCREMENT"


class CellOp(StrEnum):
    """The unit operation on one attribute column: a change record's cell op and a MUTATE_LOG cell's ``op``, in the
    schema's symbol order."""

    PUT = "PUT"
    DELETE_ONE_VERSION = "DELETE_ONE_VERSION"
    DELETE_ALL_VERSION = "DELETE_ALL_VERSION"
    INCREMENT = "INCREMENT"


#: seq_key: the seq numbers zero-padded to fixed widths, so that text order is commit order.
SEQ_KEY_FORMAT = "%010d%020d%010d%06d"
#: The seq numbers in SEQ_KEY_FORMAT's order (the fields of the envelope's ``seq`` besides ``seq_key``).
SEQ_NUMBERS = ("epoch", "timestamp_us", "row_index", "op_index")
#: Width of each seq number's zero-padded field in seq_key.
SEQ_WIDTHS: dict[str, int] = dict(
    zip(SEQ_NUMBERS, (int(width) for width in re.findall(r"%0(\d+)d", SEQ_KEY_FORMAT)), strict=True)
)
#: Length of every seq_key.
SEQ_KEY_LENGTH = sum(SEQ_WIDTHS.values())
#: Exclusive upper bounds of the seq numbers: beyond them the zero padding (or Avro's long) overflows and seq_key
#: would no longer sort as text in numeric order.
SEQ_LIMITS: dict[str, int] = {name: min(10**width, 2**63) for name, width in SEQ_WIDTHS.items()}


def seq_key(epoch: int, timestamp_us: int, row_index: int, op_index: int) -> str:
    """The seq_key of one message; callers check the numbers against SEQ_LIMITS where they may be out of range."""
    return SEQ_KEY_FORMAT % (epoch, timestamp_us, row_index, op_index)


#: Kafka header of a RECORD_IMAGE tombstone (null value) carrying its row delete's seq_key: the apply job applies a
#: bare tombstone only with it (a tombstone re-sent after a restart must not delete a row a later image re-created).
TOMBSTONE_SEQ_KEY_HEADER = "cdcbridge-seq-key"
#: Kafka header on every message of a table with redacted columns (`source.tables[].columns.mask: redact`): their
#: names, sorted and comma-separated, so a consumer tells a redacted (null) column from one the source deleted.
REDACTED_COLUMNS_HEADER = "cdcbridge-redacted-columns"
#: Kafka header of a dead-letter reference (kafka.dead_letter_topic): why the original message is not on its topic.
DEAD_LETTER_REASON_HEADER = "cdcbridge-dead-letter-reason"

#: Last part of each format's default topic name, ``<prefix>.<table>.<suffix>``.
DEFAULT_TOPIC_SUFFIX: dict[MessageFormat, str] = {
    MessageFormat.RECORD_IMAGE: "image",
    MessageFormat.MUTATE_LOG: "mutation",
}
#: ``cleanup.policy`` of each format's topic: the image topic keeps the last image per key, the log keeps every message.
TOPIC_CLEANUP_POLICY: dict[MessageFormat, str] = {
    MessageFormat.RECORD_IMAGE: "compact",
    MessageFormat.MUTATE_LOG: "delete",
}


def default_topic_name(message_format: MessageFormat, *, prefix: str, table: str) -> str:
    """``<prefix>.<table>.image`` / ``.mutation``; an empty prefix is left out (not checked against Kafka's rules)."""
    return ".".join(part for part in (prefix, table, DEFAULT_TOPIC_SUFFIX[message_format]) if part)
