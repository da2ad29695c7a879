"""The Confluent wire format of a value as both decode paths check it: header size, schema id, and what a value
that does not decode is told.

Shared by the Spark side (:mod:`cdcbridge.apply.spark.decode`) and the driver's own decode
(:mod:`.value_decode`), so a message is judged, and its dead letter worded, the same on either.
"""

from __future__ import annotations

from cdcbridge.apply.writer_schemas import WriterSchema

#: Confluent wire format: magic byte 0, 4-byte big-endian schema id, then the Avro body.
HEADER_BYTES = 5


class UnknownSchemaId(Exception):
    """A batch holds a schema id the driver has not fetched yet: fetch it and decode the batch again."""

    def __init__(self, schema_id: int) -> None:
        super().__init__(f"schema id {schema_id} is not loaded yet")
        self.schema_id = schema_id


def problem_of(vlen: int | None, magic: int | None, schema: WriterSchema | None, sid: int | None) -> str:
    """Why a non-null value has no decoded body."""
    if vlen is not None and vlen < HEADER_BYTES:
        return f"value of {vlen} bytes is shorter than the Confluent wire-format header (magic byte 0 + schema id)"
    if magic != 0:
        return (
            f"magic byte {magic} is not 0: the value is not Avro in the Confluent wire format (a schema id in a "
            "header, or another serializer?)"
        )
    if schema is None:
        return f"schema id {sid} could not be resolved"
    if schema.problem is not None:
        return schema.problem
    return f"value does not decode as Avro with writer schema id {sid} ({schema.message_format})"
