"""StreamAccess over cdcbridge.tablestore.StreamClient: the real Tablestore stream behind coordination's interfaces.

Maps the client's typed errors to coordination's: trimmed data and vanished shards keep their meaning, anything
retryable (throttling, busy, connection) becomes StreamUnavailableError, the rest StreamError with the cause.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from cdcbridge.coordination.errors import (
    InvalidPositionError,
    ShardNotFoundError,
    StreamError,
    StreamUnavailableError,
    TrimmedDataError,
)
from cdcbridge.coordination.stream.access import RecordBatch, ShardInfo
from cdcbridge.tablestore import errors as ts_errors

_T = TypeVar("_T")


class TablestoreStreamAccess:
    """ShardLister + RecordFetcher for one table's stream. `client` is a cdcbridge.tablestore.StreamClient."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table

    def list_shards(self, stream_id: str) -> list[ShardInfo]:
        shards = self._call(lambda: self._client.list_all_shards(stream_id))
        return [ShardInfo(s.shard_id, s.parent_id or None, s.parent_sibling_id or None) for s in shards]

    def get_shard_iterator(self, stream_id: str, shard_id: str) -> str:
        return self._call(lambda: self._client.get_shard_iterator(stream_id, shard_id))

    def get_records(self, iterator: str, limit: int) -> RecordBatch:
        page = self._call(lambda: self._client.get_stream_record(iterator, limit, table=self._table))
        return RecordBatch(list(page.records), page.next_shard_iterator)

    def _call(self, call: Callable[[], _T]) -> _T:
        with _mapped_errors():
            return call()


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except ts_errors.TrimmedDataError as exc:
        raise TrimmedDataError(str(exc)) from exc
    except ts_errors.ShardNotFoundError as exc:
        raise ShardNotFoundError(str(exc)) from exc
    except ts_errors.InvalidRequestError as exc:
        raise InvalidPositionError(str(exc)) from exc
    except ts_errors.StreamError as exc:
        if exc.retryable:
            raise StreamUnavailableError(str(exc)) from exc
        raise StreamError(f"{type(exc).__name__}: {exc}") from exc
