"""Errors of the apply job around the pure core: Kafka framing, the registry, table routing and the targets.

They extend the core's family (:mod:`cdcbridge.apply.errors`): bad input is a
:class:`~cdcbridge.apply.errors.BadInputError` (stop or dead-letter per ``apply.on_bad_record``), everything else
stops the job with a message that says what to fix.
"""

from __future__ import annotations

from cdcbridge.apply.errors import ApplyError, BadInputError, InvalidMessageError


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
