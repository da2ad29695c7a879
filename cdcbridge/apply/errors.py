"""The apply job's one exception family: the pure core's errors, then those of Kafka framing, the registry and targets.

Every error names the Kafka message it came from (topic / partition / offset, when the caller passed them as the
extra keys ``_topic``, ``_partition``, ``_offset``) and says what to do. Bad input (:class:`BadInputError`) goes
through the :class:`~cdcbridge.apply.core.policy.BadInputPolicy` (stop or dead-letter); the other errors are caller
bugs and always raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class MessageLocation:
    """Where a message was read from Kafka; any part may be unknown."""

    topic: str | None = None
    partition: int | None = None
    offset: int | None = None

    @classmethod
    def of(cls, message: Mapping[str, Any] | None) -> MessageLocation | None:
        """The location a decoded message carries in its extra keys, or None if it carries none."""
        if not isinstance(message, Mapping):
            return None
        topic, partition, offset = message.get("_topic"), message.get("_partition"), message.get("_offset")
        if topic is None and partition is None and offset is None:
            return None
        return cls(
            topic=str(topic) if topic is not None else None,
            partition=_int_or_none(partition),
            offset=_int_or_none(offset),
        )

    def describe(self) -> str:
        """``topic 'db.t.mutation' partition 3 offset 17`` (unknown parts left out)."""
        parts = []
        if self.topic is not None:
            parts.append(f"topic {self.topic!r}")
        if self.partition is not None:
            parts.append(f"partition {self.partition}")
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        return " ".join(parts) or "unknown position"


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class ApplyError(Exception):
    """Base of every error raised by cdcbridge.apply; the text is ``problem (message at …); fix``."""

    default_fix = ""

    def __init__(self, problem: str, *, location: MessageLocation | None = None, fix: str | None = None) -> None:
        self.problem = problem
        self.location = location
        self.fix = self.default_fix if fix is None else fix
        text = problem
        if location is not None:
            text += f" (message at {location.describe()})"
        if self.fix:
            text += f"; {self.fix}"
        super().__init__(text)


class BadInputError(ApplyError):
    """A message the apply job cannot apply. Handled by the bad-input policy: stop (default) or dead-letter."""

    default_fix = (
        "the producer must write the envelope of DESIGN §6; to set such messages aside and continue, "
        "run the apply job with on_bad_input='dead_letter'"
    )


class InvalidMessageError(BadInputError):
    """A decoded envelope misses a required field, has a field of the wrong type, or an unknown op/type."""


class IncrementError(BadInputError):
    """An INCREMENT cannot be applied: its amount/value is not an integer, or the column holds a non-integer."""


class InvalidGroupError(ApplyError):
    """The operations handed to one fold do not belong to one row and one format (a bug in the caller, or
    image and mutation topics of one table fed into the same target)."""

    default_fix = (
        "group operations by (table, pk) before folding, and feed a target table from either the RECORD_IMAGE "
        "or the MUTATE_LOG topic of a source table, never both"
    )


class InvalidSettingError(ApplyError, ValueError):
    """A setting of the apply core (e.g. the bad-input action) has an unknown value."""


class InvalidBatchMarkerError(ApplyError):
    """An (app id, batch id) marker is malformed."""

    default_fix = "use a non-empty app id (one per checkpoint location) and Spark's non-negative batch id"


class UndecodableMessageError(InvalidMessageError):
    """A Kafka value is not Confluent-framed Avro of a cdcbridge envelope (bad magic byte, unknown schema id,
    bytes that do not decode with the writer schema)."""

    default_fix = (
        "only the bridge should write to these topics (Confluent wire format, schemas from schemas/*.avsc); "
        "to set such messages aside and continue, set apply.on_bad_record: dead_letter"
    )


class UnmappedTableError(BadInputError):
    """A message names a table the configuration does not apply (not in source.tables, or not the table of
    its topic)."""

    default_fix = (
        "add the table to source.tables (and its topic to the subscription), or set apply.on_bad_record: "
        "dead_letter to set its messages aside"
    )


class TargetRejectedError(BadInputError):
    """A folded row the target cannot store, e.g. a column whose value type differs from the column's type."""

    default_fix = (
        "a column must keep one type (Tablestore INTEGER, DOUBLE, BOOLEAN, STRING or BINARY) for a typed target; "
        "fix the writer, or set apply.on_bad_record: dead_letter to set the row's operations aside"
    )


class ApplyJobError(ApplyError):
    """The streaming job failed for a reason that is not one bad message (Spark, Kafka, the target)."""

    default_fix = "see the cause above; the job resumes from its checkpoint when restarted"


class RegistryLookupError(ApplyError):
    """The schema registry did not answer for a writer schema id."""

    default_fix = "check kafka.schema_registry.url and that the registry runs; the batch is retried on restart"


class TargetError(ApplyError):
    """The target is unreachable, misconfigured, or holds a table that does not look like ours."""

    default_fix = "check the apply section of the configuration (target, delta_path, postgres_dsn, tablestore_*)"
