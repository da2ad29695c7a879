"""cdcbridge.formats: change records → Kafka keys and Avro envelope values (RECORD_IMAGE, MUTATE_LOG).

Builds messages and never sends them: no Kafka, registry or coordination code here. The message contract they
follow (formats, types, seq_key, topic names) is :mod:`cdcbridge.contract`.
"""

from cdcbridge.formats.common import MessageItem
from cdcbridge.formats.errors import (
    FormatError,
    InvalidRecordError,
    KeyDecodeError,
    KeyEncodeError,
    SchemaNotFoundError,
    TopicNameError,
)
from cdcbridge.formats.keys import decode_key, encode_key, java_partition, murmur2, record_key
from cdcbridge.formats.mutate_log import build_mutate_log, unit_operations
from cdcbridge.formats.record_image import CurrentRow, build_record_image, needs_current_row
from cdcbridge.formats.schemas import find_schemas_dir, parsed_schema, schema_dict, schema_text
from cdcbridge.formats.table_format import BridgeTableFormat
from cdcbridge.formats.table_messages import TableMessage, build_table_messages, needs_row_lookup

__all__ = [
    "BridgeTableFormat",
    "CurrentRow",
    "FormatError",
    "InvalidRecordError",
    "KeyDecodeError",
    "KeyEncodeError",
    "MessageItem",
    "SchemaNotFoundError",
    "TableMessage",
    "TopicNameError",
    "build_mutate_log",
    "build_record_image",
    "build_table_messages",
    "decode_key",
    "encode_key",
    "find_schemas_dir",
    "java_partition",
    "murmur2",
    "needs_current_row",
    "needs_row_lookup",
    "parsed_schema",
    "record_key",
    "schema_dict",
    "schema_text",
    "unit_operations",
]
