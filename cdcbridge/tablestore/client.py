"""StreamClient: the Tablestore Stream APIs on top of an official OTSClient, with typed results and errors.

Every call goes through the SDK's request path (signing, response checks, the client's retry policy); this class
only builds requests, decodes answers into :mod:`cdcbridge.tablestore.models` / :mod:`cdcbridge.changes` types and maps
errors into :mod:`cdcbridge.tablestore.errors`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tablestore.error import OTSError
from urllib3.exceptions import HTTPError

from cdcbridge.changes import ChangeRecord
from cdcbridge.tablestore.errors import CorruptRecordError, StreamError, StreamServiceError, map_sdk_error
from cdcbridge.tablestore.models import (
    ShardInfo,
    StreamDescription,
    StreamInfo,
    StreamRecordsPage,
    StreamStatus,
    TableStreamDetails,
)
from cdcbridge.tablestore.plainbuffer import PlainBufferError
from cdcbridge.tablestore.proto import stream_pb2
from cdcbridge.tablestore.records import decode_stream_record
from cdcbridge.tablestore.sdk_extension import install_stream_apis

#: Upper bound of DescribeStream pages walked by :meth:`StreamClient.list_all_shards` (a guard against a server that
#: keeps answering with the same `next_shard_id`).
MAX_SHARD_PAGES = 10_000
#: Upper bound of GetShardIterator pages when seeking by timestamp.
MAX_SEEK_PAGES = 10_000
#: First pause (seconds) before resending a read whose connection failed; doubled per attempt.
TRANSPORT_RETRY_DELAY = 0.1

_STATUS = {stream_pb2.STREAM_ENABLING: StreamStatus.ENABLING, stream_pb2.STREAM_ACTIVE: StreamStatus.ACTIVE}


class StreamClient:
    """Stream calls on `ots_client` (an official ``tablestore.OTSClient``; the stream APIs get installed on it).

    `check_crc` verifies the PlainBuffer checksums of every record; turn it off only to read past a known-bad record.
    The SDK retries service errors (per its retry policy, see :class:`~cdcbridge.tablestore.retry.StreamRetryPolicy`)
    but never a failed connection; reads change nothing, so this client resends them `transport_retries` times.
    """

    def __init__(
        self,
        ots_client: Any,
        *,
        check_crc: bool = True,
        transport_retries: int = 2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._ots = install_stream_apis(ots_client)
        self._check_crc = check_crc
        self._transport_retries = transport_retries
        self._sleep = sleep

    @property
    def ots_client(self) -> Any:
        """The wrapped SDK client, for table and row calls."""
        return self._ots

    # -- table stream settings -----------------------------------------------------------------------------------

    def enable_stream(
        self, table: str, expiration_hours: int, *, columns_to_get: tuple[str, ...] = ()
    ) -> TableStreamDetails:
        """Turn the table's stream on, keeping records `expiration_hours` hours; returns the new settings.

        `columns_to_get` asks the service for pre-image columns in each record (newer services only).
        """
        if expiration_hours <= 0:
            raise ValueError(f"expiration_hours must be positive to enable the stream of table {table}")
        spec = stream_pb2.StreamSpecification(
            enable_stream=True, expiration_time=expiration_hours, columns_to_get=list(columns_to_get)
        )
        with self._mapped_errors("UpdateTable", table=table):
            result = self._ots._request_helper("UpdateTable", table, None, None, stream_spec=spec)
        details = getattr(result, "stream_details", None)
        return _table_stream_details(details) if details is not None else self.describe_table_stream(table)

    def disable_stream(self, table: str) -> None:
        """Turn the table's stream off; its records become unreadable and a later enable starts a new stream."""
        spec = stream_pb2.StreamSpecification(enable_stream=False)
        with self._mapped_errors("UpdateTable", table=table):
            self._ots._request_helper("UpdateTable", table, None, None, stream_spec=spec)

    def create_table_with_stream(
        self,
        table_meta: Any,
        table_options: Any,
        reserved_throughput: Any,
        expiration_hours: int,
        *,
        columns_to_get: tuple[str, ...] = (),
    ) -> None:
        """CreateTable with the stream already on (SDK ``TableMeta`` / ``TableOptions`` / ``ReservedThroughput``)."""
        if expiration_hours <= 0:
            raise ValueError(f"expiration_hours must be positive to enable the stream of table {table_meta.table_name}")
        spec = stream_pb2.StreamSpecification(
            enable_stream=True, expiration_time=expiration_hours, columns_to_get=list(columns_to_get)
        )
        with self._mapped_errors("CreateTable", table=table_meta.table_name):
            self._ots._request_helper(
                "CreateTable", table_meta, table_options, reserved_throughput, None, [], stream_spec=spec
            )

    def describe_table_stream(self, table: str) -> TableStreamDetails:
        """The table's stream settings (disabled when the service sends none)."""
        with self._mapped_errors("DescribeTable", table=table):
            result = self._read("DescribeTable", table)
        details = getattr(result, "stream_details", None)
        return _table_stream_details(details) if details is not None else TableStreamDetails(enabled=False)

    # -- streams and shards ----------------------------------------------------------------------------------------

    def list_stream(self, table: str | None = None) -> list[StreamInfo]:
        """Streams of the instance, or only `table`'s (empty when its stream is off)."""
        request = stream_pb2.ListStreamRequest()
        if table is not None:
            request.table_name = table
        with self._mapped_errors("ListStream", table=table):
            response = self._read("ListStream", request)
        return [StreamInfo(s.stream_id, s.table_name, s.creation_time) for s in response.streams]

    def describe_stream(
        self, stream_id: str, inclusive_start_shard_id: str | None = None, shard_limit: int | None = None
    ) -> StreamDescription:
        """One page of the stream's shards, starting at `inclusive_start_shard_id`; see :meth:`list_all_shards`."""
        request = stream_pb2.DescribeStreamRequest(stream_id=stream_id)
        if inclusive_start_shard_id is not None:
            request.inclusive_start_shard_id = inclusive_start_shard_id
        if shard_limit is not None:
            request.shard_limit = shard_limit
        with self._mapped_errors("DescribeStream", stream_id=stream_id):
            response = self._read("DescribeStream", request)
        return StreamDescription(
            stream_id=response.stream_id,
            table_name=response.table_name,
            status=_STATUS.get(response.stream_status, StreamStatus.ENABLING),
            expiration_hours=response.expiration_time,
            creation_time=response.creation_time,
            shards=tuple(
                ShardInfo(shard.shard_id, shard.parent_id or None, shard.parent_sibling_id or None)
                for shard in response.shards
            ),
            next_shard_id=response.next_shard_id if response.HasField("next_shard_id") else None,
        )

    def list_all_shards(self, stream_id: str, *, shard_limit: int | None = None) -> list[ShardInfo]:
        """Every shard of the stream, paging DescribeStream until `next_shard_id` runs out."""
        shards: list[ShardInfo] = []
        seen: set[str] = set()
        start: str | None = None
        for _ in range(MAX_SHARD_PAGES):
            page = self.describe_stream(stream_id, inclusive_start_shard_id=start, shard_limit=shard_limit)
            for shard in page.shards:
                if shard.shard_id not in seen:
                    seen.add(shard.shard_id)
                    shards.append(shard)
            if not page.next_shard_id:
                return shards
            if page.next_shard_id == start:
                raise StreamServiceError(
                    f"DescribeStream on stream {stream_id} keeps answering next_shard_id={start}; the shard list "
                    "cannot be read to the end. Retry later"
                )
            start = page.next_shard_id
        raise StreamServiceError(f"DescribeStream on stream {stream_id} returned more than {MAX_SHARD_PAGES} pages")

    def get_shard_iterator(self, stream_id: str, shard_id: str, timestamp_us: int | None = None) -> str:
        """An iterator at the shard's oldest retained record, or (newer services) at `timestamp_us`.

        A timestamp seek may take several pages (``next_token``); the last page's iterator is the answer.
        """
        request = stream_pb2.GetShardIteratorRequest(stream_id=stream_id, shard_id=shard_id)
        if timestamp_us is not None:
            request.timestamp = timestamp_us
        for _ in range(MAX_SEEK_PAGES):
            with self._mapped_errors("GetShardIterator", stream_id=stream_id, shard_id=shard_id):
                response = self._read("GetShardIterator", request)
            if timestamp_us is None or not response.next_token:
                return response.shard_iterator
            request.token = response.next_token
        raise StreamServiceError(
            f"GetShardIterator on stream {stream_id}, shard {shard_id} kept paging past {MAX_SEEK_PAGES} tokens"
        )

    def get_stream_record(
        self, shard_iterator: str, limit: int | None = None, *, table: str = "", shard_id: str = ""
    ) -> StreamRecordsPage:
        """The records at `shard_iterator` (at most `limit`), decoded, and the iterator to continue from.

        `table` and `shard_id` only label the decoded records (iterators are opaque, so they cannot be derived).
        """
        request = stream_pb2.GetStreamRecordRequest(shard_iterator=shard_iterator)
        if limit is not None:
            request.limit = limit
        with self._mapped_errors("GetStreamRecord", table=table or None, shard_id=shard_id or None):
            response = self._read("GetStreamRecord", request)
        records = [
            self._decode(item, table=table, shard_id=shard_id, record_index=index)
            for index, item in enumerate(response.stream_records)
        ]
        return StreamRecordsPage(
            records=records,
            next_shard_iterator=response.next_shard_iterator if response.HasField("next_shard_iterator") else None,
            may_more_record=response.may_more_record if response.HasField("may_more_record") else None,
        )

    # -- internals -------------------------------------------------------------------------------------------------

    def _decode(
        self,
        item: stream_pb2.GetStreamRecordResponse.StreamRecord,
        *,
        table: str,
        shard_id: str,
        record_index: int,
    ) -> ChangeRecord:
        try:
            record = decode_stream_record(
                item.record,
                item.action_type,
                table=table,
                shard_id=shard_id,
                record_index=record_index,
                check_crc=self._check_crc,
            )
        except PlainBufferError as error:
            raise CorruptRecordError(
                f"a stream record of table {table or '?'} cannot be decoded: {error}. Re-read from the last "
                "checkpoint; if it persists, the record is corrupt (check_crc=False reads past checksum errors only)"
            ) from error
        if item.HasField("origin_record"):
            record.extra["origin_record"] = item.origin_record
        return record

    def _read(self, api: str, *args: Any) -> Any:
        """Send a read through the SDK; resend it when the connection failed (no answer arrived)."""
        attempt = 0
        while True:
            try:
                return self._ots._request_helper(api, *args)
            except (OSError, HTTPError):
                if attempt >= self._transport_retries:
                    raise
                self._sleep(TRANSPORT_RETRY_DELAY * 2**attempt)
                attempt += 1

    @contextmanager
    def _mapped_errors(
        self,
        api: str,
        *,
        table: str | None = None,
        stream_id: str | None = None,
        shard_id: str | None = None,
    ) -> Iterator[None]:
        try:
            yield
        except StreamError:
            raise
        except (OTSError, OSError, HTTPError) as error:
            raise map_sdk_error(error, api=api, table=table, stream_id=stream_id, shard_id=shard_id) from error


def _table_stream_details(details: stream_pb2.StreamDetails) -> TableStreamDetails:
    if not details.enable_stream:
        return TableStreamDetails(enabled=False)
    return TableStreamDetails(
        enabled=True,
        stream_id=details.stream_id or None,
        expiration_hours=details.expiration_time if details.HasField("expiration_time") else None,
        last_enable_time_us=details.last_enable_time if details.HasField("last_enable_time") else None,
        columns_to_get=tuple(details.column_to_get),
    )
