"""Key ranges of a table for a parallel export, from the service's ComputeSplitPointsBySize.

The official Python SDK has the request and response messages but no call, so the API is registered on the
client's protocol the way :mod:`cdcbridge.tablestore.sdk_extension` registers the stream APIs, and sent through the
SDK's request path (signing, retries, error checks). A split point is a PlainBuffer primary key (trailing -inf
columns may be left out); the ranges are [-inf, p1), [p1, p2), ..., [pn, +inf).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import tablestore.protobuf.table_store_pb2 as pb2
from tablestore import INF_MAX, INF_MIN, OTSClientError, OTSServiceError

from cdcbridge.snapshot.errors import SplitPointsError
from cdcbridge.snapshot.key_bounds import KeyBound, highest_bound, lowest_bound
from cdcbridge.tablestore import plainbuffer

log = logging.getLogger(__name__)

API_NAME = "ComputeSplitPointsBySize"
#: Error codes of a service (or emulator) that does not offer the API: the export then scans one range.
_UNSUPPORTED = frozenset({"OTSUnsupportOperation", "OTSUnsupportedOperation"})
_SENTINELS = {plainbuffer.INF_MIN: INF_MIN, plainbuffer.INF_MAX: INF_MAX}


@dataclass(frozen=True)
class KeyRange:
    """[begin, end) of the primary key; `index` numbers the ranges of one table in key order."""

    index: int
    begin: KeyBound
    end: KeyBound


def install_split_points_api(ots_client: Any) -> Any:
    """Teach `ots_client` (an official OTSClient) ComputeSplitPointsBySize (idempotent); returns the client."""
    protocol = ots_client.protocol
    if API_NAME in protocol.api_list:
        return ots_client
    protocol.api_list = [*protocol.api_list, API_NAME]
    protocol.encoder.api_encode_map[API_NAME] = _encode_request
    protocol.decoder.api_decode_map[API_NAME] = _decode_response
    return ots_client


def _encode_request(table: str, split_size_bytes: int) -> pb2.ComputeSplitPointsBySizeRequest:
    # One unit of exactly the wanted size: no rounding to the default 100 MB unit.
    return pb2.ComputeSplitPointsBySizeRequest(table_name=table, split_size=1, split_size_unit_in_byte=split_size_bytes)


def _decode_response(body: bytes, request_id: str) -> tuple[Any, Any]:
    response = pb2.ComputeSplitPointsBySizeResponse()
    response.ParseFromString(body)
    return response, response


def key_ranges(ots_client: Any, table: str, split_size_bytes: int) -> list[KeyRange]:
    """Consecutive ranges covering the whole key space of `table`, each about `split_size_bytes` of data."""
    install_split_points_api(ots_client)
    try:
        response = ots_client._request_helper(API_NAME, table, split_size_bytes)
    except OTSServiceError as error:
        if error.get_error_code() in _UNSUPPORTED:
            log.warning("%s is not offered by the source (%s); table %s is exported as one range",
                        API_NAME, error.get_error_code(), table)  # fmt: skip
            return [_whole_table(ots_client, table)]
        raise SplitPointsError(
            f"cannot split table {table} into key ranges: {error.get_error_code()} {error.get_error_message()}"
        ) from None
    except OTSClientError as error:
        raise SplitPointsError(f"cannot split table {table} into key ranges: {error.get_error_message()}") from None
    columns = [column.name for column in response.schema]
    if not columns:
        raise SplitPointsError(f"{API_NAME} of table {table} answered without the primary-key schema")
    return ranges_from_points(columns, [split_point(columns, raw, table) for raw in response.split_points])


def split_point(columns: list[str], raw: bytes, table: str) -> KeyBound:
    """Decode one split point; missing trailing columns are -inf (the service leaves them out)."""
    try:
        pairs = plainbuffer.decode_row(raw).primary_key
    except plainbuffer.PlainBufferError as error:
        raise SplitPointsError(f"{API_NAME} of table {table} sent an unreadable split point: {error}") from None
    names = [name for name, _ in pairs]
    if names != columns[: len(names)]:
        raise SplitPointsError(f"{API_NAME} of table {table}: split point columns {names} do not match {columns}")
    values = [_SENTINELS.get(value, value) if isinstance(value, plainbuffer.PrimaryKeySentinel) else value
              for _, value in pairs]  # fmt: skip
    return list(zip(columns, values + [INF_MIN] * (len(columns) - len(values)), strict=True))


def ranges_from_points(columns: list[str], points: list[KeyBound]) -> list[KeyRange]:
    bounds = [lowest_bound(columns), *points, highest_bound(columns)]
    return [KeyRange(i, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def _whole_table(ots_client: Any, table: str) -> KeyRange:
    try:
        schema = ots_client.describe_table(table).table_meta.schema_of_primary_key
    except (OTSServiceError, OTSClientError) as error:
        raise SplitPointsError(f"cannot describe table {table}: {error}") from None
    columns = [column[0] for column in schema]
    return ranges_from_points(columns, [])[0]
