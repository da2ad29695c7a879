"""The documented Tablestore limits the emulator enforces, and the error each one answers with.

Values from Alibaba's "Limits on the Wide Column model" page; codes and message shapes are the ones Alibaba's
own SDK tests assert against the real service (RestrictedItemTest), so a client sees locally what production says.

| limit                                            | value          | answer (all HTTP 400 OTSParameterInvalid)       |
|--------------------------------------------------|----------------|-------------------------------------------------|
| STRING / BINARY attribute value                  | 2 MiB          | The length of attribute column: 'c' exceeds ... |
| STRING / BINARY primary-key value                | 1 KiB          | The length of primary key column: 'k' exceeds...|
| primary-key columns of a table                   | 1 to 4         | The number of primary key columns must be ...   |
| defined (predefined) columns of a table          | 0 to 32        | The number of defined columns must be ...       |
| attribute columns written to one row             | 1024           | The number of attribute columns exceeds ...     |
| columns_to_get of one read                       | 1024           | The number of columns from the request ...      |
| data of one PutRow / UpdateRow / BatchWriteRow   | 4 MiB          | The total data size of <Api> request exceeds ...|
| rows of one BatchWriteRow / BatchGetRow          | 200 / 100      | Rows count exceeds the upper limit: N.          |
| rows / bytes one GetRange answers                | 5000 / 4 MiB   | (not an error: the answer stops, with next key) |
| table and column names                           | 1-255 of [A-Za-z0-9_], not starting with a digit |
| cell timestamp (ms)                              | [0, INT64_MAX/1000)                              |
| request body                                     | 5 MiB          | HTTP 413 OTSRequestBodyTooLarge                 |

Data size is counted as the service does: primary-key names and values, column names and values, and 8 bytes per
cell timestamp the client gave (integers and doubles 8 bytes, booleans 1, strings their UTF-8 bytes).
Not enforced (documented choice): the 64 tables per instance and the reserved-throughput bounds, because an
emulator shared by many test runs would hit them for reasons that have nothing to do with the code under test.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cdcbridge.emulator.errors import ParameterInvalid

MAX_ATTRIBUTE_VALUE_BYTES = 2 * 1024 * 1024
MAX_PK_VALUE_BYTES = 1024
MAX_PK_COLUMNS = 4
MAX_DEFINED_COLUMNS = 32
MAX_COLUMNS_PER_WRITE = 1024
MAX_COLUMNS_TO_GET = 1024
MAX_REQUEST_DATA_BYTES = 4 * 1024 * 1024
MAX_BATCH_WRITE_ROWS = 200
MAX_BATCH_GET_ROWS = 100
MAX_RANGE_ROWS = 5000
MAX_RANGE_BYTES = 4 * 1024 * 1024
MAX_NAME_BYTES = 255
#: Cell timestamps are milliseconds below INT64_MAX / 1000 (the service keeps versions in microseconds).
MAX_TIMESTAMP_MS = ((1 << 63) - 1) // 1000
#: Larger request bodies are refused with 413 OTSRequestBodyTooLarge before they are parsed.
MAX_REQUEST_BODY_BYTES = 5 * 1024 * 1024
#: Bytes a cell timestamp given by the client adds to the request's data size.
TIMESTAMP_BYTES = 8


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits one emulated instance enforces (the documented values by default; tests may lower them)."""

    max_attribute_value_bytes: int = MAX_ATTRIBUTE_VALUE_BYTES
    max_pk_value_bytes: int = MAX_PK_VALUE_BYTES
    max_columns_per_write: int = MAX_COLUMNS_PER_WRITE
    max_columns_to_get: int = MAX_COLUMNS_TO_GET
    max_request_data_bytes: int = MAX_REQUEST_DATA_BYTES
    max_batch_write_rows: int = MAX_BATCH_WRITE_ROWS
    max_batch_get_rows: int = MAX_BATCH_GET_ROWS
    max_range_rows: int = MAX_RANGE_ROWS
    max_range_bytes: int = MAX_RANGE_BYTES


def value_size(value: Any) -> int:
    """Bytes of one value as the service counts them."""
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes | bytearray):
        return len(value)
    if value is None:
        return 0
    if isinstance(value, bool):
        return 1
    return 8


def _upper_bound(value: Any) -> int:
    """A cheap upper bound of value_size (a UTF-8 character is at most 4 bytes), to skip encoding small strings."""
    kind = type(value)
    if kind is str:
        return 4 * len(value)
    if kind is bytes or kind is bytearray:
        return len(value)
    return 8


class SizedCell(Protocol):
    """A written cell as data sizes count it (the model's CellChange): a given timestamp adds 8 bytes."""

    name: str
    value: Any
    timestamp: int | None


def check_attribute_value(name: str, value: Any, limit: int) -> None:
    if isinstance(value, str | bytes | bytearray) and _upper_bound(value) > limit:
        length = value_size(value)
        if length > limit:
            raise ParameterInvalid(
                f"The length of attribute column: '{name}' exceeds the MaxLength:{limit} with CurrentLength:{length}."
            )


def check_primary_key_value(name: str, value: Any, limit: int = MAX_PK_VALUE_BYTES) -> None:
    if isinstance(value, str | bytes | bytearray) and _upper_bound(value) > limit:
        length = value_size(value)
        if length > limit:
            raise ParameterInvalid(
                f"The length of primary key column: '{name}' exceeds the MaxLength:{limit} with CurrentLength:{length}."
            )


def check_primary_key_count(count: int) -> None:
    if not 1 <= count <= MAX_PK_COLUMNS:
        raise ParameterInvalid(f"The number of primary key columns must be in range: [1, {MAX_PK_COLUMNS}].")


def check_defined_column_count(count: int) -> None:
    if count > MAX_DEFINED_COLUMNS:
        raise ParameterInvalid(f"The number of defined columns must be in range: [0, {MAX_DEFINED_COLUMNS}].")


def check_columns_per_write(count: int, limit: int) -> None:
    if count > limit:
        raise ParameterInvalid(
            f"The number of attribute columns exceeds the limit, limit count: {limit}, column count: {count}."
        )


def check_columns_to_get(count: int, limit: int) -> None:
    if count > limit:
        raise ParameterInvalid(
            f"The number of columns from the request exceeds the limit, limit count: {limit}, column count: {count}."
        )


def check_rows_per_batch(count: int, limit: int) -> None:
    if count > limit:
        raise ParameterInvalid(f"Rows count exceeds the upper limit: {limit}.")


def check_timestamp(timestamp: Any) -> None:
    if type(timestamp) is not int or not 0 <= timestamp < MAX_TIMESTAMP_MS:
        raise ParameterInvalid("Timestamp must be in range [0, INT64_MAX/1000).")


def row_data_size(primary_key: Sequence[tuple[str, Any]], cells: Iterable[SizedCell]) -> int:
    """Data size of one row write: primary-key names and values, cell names and values, given timestamps."""
    size = sum(len(name) + value_size(value) for name, value in primary_key)
    for cell in cells:
        size += len(cell.name) + value_size(cell.value) + (0 if cell.timestamp is None else TIMESTAMP_BYTES)
    return size


def row_data_upper_bound(primary_key: Sequence[tuple[str, Any]], cells: Iterable[SizedCell]) -> int:
    """At least row_data_size, without encoding strings: rows under the limit by this bound need no exact count."""
    size = 0
    for name, value in primary_key:
        size += len(name) + _upper_bound(value)
    for cell in cells:
        value = cell.value
        kind = type(value)
        if kind is str:
            size += len(cell.name) + 4 * len(value) + TIMESTAMP_BYTES
        elif kind is bytes or kind is bytearray:
            size += len(cell.name) + len(value) + TIMESTAMP_BYTES
        else:
            size += len(cell.name) + 16
    return size


def check_request_data_size(api_name: str, size: int, limit: int) -> None:
    if size > limit:
        raise ParameterInvalid(
            f"The total data size of {api_name} request exceeds the limit, limit size: {limit}, data size: {size}."
        )
