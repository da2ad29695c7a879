"""Our own PlainBuffer codec for Tablestore rows: reader and writer.

The official SDK's reader cannot read cell types or the stream-record extension, so the stream client, the
emulator and the snapshot code all go through this package. See research/tablestore_stream.md §4 for the format.
"""

from cdcbridge.tablestore.plainbuffer.accelerator import IMPLEMENTATION
from cdcbridge.tablestore.plainbuffer.constants import (
    CELL_DELETE_ALL_VERSION,
    CELL_DELETE_ONE_VERSION,
    CELL_INCREMENT,
)
from cdcbridge.tablestore.plainbuffer.errors import PlainBufferEncodeError, PlainBufferError
from cdcbridge.tablestore.plainbuffer.reader import (
    decode_column_value,
    decode_row,
    decode_rows,
)
from cdcbridge.tablestore.plainbuffer.rows import (
    AUTO_INCREMENT,
    INF_MAX,
    INF_MIN,
    PlainCell,
    PlainRow,
    PrimaryKeySentinel,
    PrimaryKeyValue,
    Value,
)
from cdcbridge.tablestore.plainbuffer.writer import encode_column_value, encode_row, encode_rows

__all__ = [
    "AUTO_INCREMENT",
    "CELL_DELETE_ALL_VERSION",
    "CELL_DELETE_ONE_VERSION",
    "CELL_INCREMENT",
    "IMPLEMENTATION",
    "INF_MAX",
    "INF_MIN",
    "PlainBufferEncodeError",
    "PlainBufferError",
    "PlainCell",
    "PlainRow",
    "PrimaryKeySentinel",
    "PrimaryKeyValue",
    "Value",
    "decode_column_value",
    "decode_row",
    "decode_rows",
    "encode_column_value",
    "encode_row",
    "encode_rows",
]
