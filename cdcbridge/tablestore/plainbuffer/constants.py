"""PlainBuffer wire constants (Tablestore's row format), named as in the Java SDK's PlainBufferConsts.

All multi-byte integers on the wire are little-endian.
"""

from __future__ import annotations

from typing import Final

#: Every PlainBuffer block starts with this value as a little-endian int32.
HEADER: Final = 0x75

# Tags.
TAG_ROW_PK: Final = 0x01
TAG_ROW_DATA: Final = 0x02
TAG_CELL: Final = 0x03
TAG_CELL_NAME: Final = 0x04
TAG_CELL_VALUE: Final = 0x05
TAG_CELL_TYPE: Final = 0x06
TAG_CELL_TIMESTAMP: Final = 0x07
TAG_DELETE_ROW_MARKER: Final = 0x08
TAG_ROW_CHECKSUM: Final = 0x09
TAG_CELL_CHECKSUM: Final = 0x0A
TAG_EXTENSION: Final = 0x0B
TAG_SEQ_INFO: Final = 0x0C
TAG_SEQ_INFO_EPOCH: Final = 0x0D
TAG_SEQ_INFO_TS: Final = 0x0E
TAG_SEQ_INFO_ROW_INDEX: Final = 0x0F

TAG_NAMES: Final = {
    TAG_ROW_PK: "TAG_ROW_PK",
    TAG_ROW_DATA: "TAG_ROW_DATA",
    TAG_CELL: "TAG_CELL",
    TAG_CELL_NAME: "TAG_CELL_NAME",
    TAG_CELL_VALUE: "TAG_CELL_VALUE",
    TAG_CELL_TYPE: "TAG_CELL_TYPE",
    TAG_CELL_TIMESTAMP: "TAG_CELL_TIMESTAMP",
    TAG_DELETE_ROW_MARKER: "TAG_DELETE_ROW_MARKER",
    TAG_ROW_CHECKSUM: "TAG_ROW_CHECKSUM",
    TAG_CELL_CHECKSUM: "TAG_CELL_CHECKSUM",
    TAG_EXTENSION: "TAG_EXTENSION",
    TAG_SEQ_INFO: "TAG_SEQ_INFO",
    TAG_SEQ_INFO_EPOCH: "TAG_SEQ_INFO_EPOCH",
    TAG_SEQ_INFO_TS: "TAG_SEQ_INFO_TS",
    TAG_SEQ_INFO_ROW_INDEX: "TAG_SEQ_INFO_ROW_INDEX",
}

# Cell operation types (the byte after TAG_CELL_TYPE); a cell without one is a PUT.
CELL_DELETE_ALL_VERSION: Final = 0x01
CELL_DELETE_ONE_VERSION: Final = 0x03
CELL_INCREMENT: Final = 0x04
CELL_TYPES: Final = frozenset({CELL_DELETE_ALL_VERSION, CELL_DELETE_ONE_VERSION, CELL_INCREMENT})

# Variant (value) types: the first byte of every encoded value.
VT_INTEGER: Final = 0x00
VT_DOUBLE: Final = 0x01
VT_BOOLEAN: Final = 0x02
VT_STRING: Final = 0x03
VT_BLOB: Final = 0x07
VT_INF_MIN: Final = 0x09
VT_INF_MAX: Final = 0x0A
VT_AUTO_INCREMENT: Final = 0x0B

#: Payload size of TAG_SEQ_INFO: epoch (tag+int32) + timestamp (tag+int64) + row index (tag+int32).
SEQ_INFO_SIZE: Final = 19
#: Payload size of TAG_EXTENSION when it carries only the sequence info (tag + int32 length + 19).
EXTENSION_SIZE: Final = 5 + SEQ_INFO_SIZE


def tag_name(tag: int) -> str:
    """Readable name of a tag byte for error messages."""
    return TAG_NAMES.get(tag, f"unknown tag 0x{tag:02x}")
