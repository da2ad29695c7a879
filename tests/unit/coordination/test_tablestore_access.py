"""TablestoreStreamAccess: paging is the client's, errors are mapped to coordination's meaning."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.coordination import ShardInfo, ShardNotFoundError, StreamError, StreamUnavailableError, TrimmedDataError
from cdcbridge.coordination.stream.tablestore_access import TablestoreStreamAccess
from cdcbridge.tablestore import errors as ts_errors
from cdcbridge.tablestore.models import ShardInfo as ClientShard
from cdcbridge.tablestore.models import StreamRecordsPage


@dataclass
class FakeStreamClient:
    error: Exception | None = None

    def list_all_shards(self, stream_id: str) -> list[ClientShard]:
        self._raise()
        return [ClientShard("a"), ClientShard("b", "a"), ClientShard("c", "a", "x")]

    def get_shard_iterator(self, stream_id: str, shard_id: str) -> str:
        self._raise()
        return f"{stream_id}/{shard_id}/0"

    def get_stream_record(self, iterator: str, limit: int | None = None, *, table: str = "") -> StreamRecordsPage:
        self._raise()
        record = ChangeRecord(table, RecordAction.PUT, [("pk", 1)], [Cell("v", CellOp.PUT, 1)], Sequence(1, 2, 3))
        return StreamRecordsPage([record], None)

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error


def test_shards_iterators_and_records_pass_through() -> None:
    access = TablestoreStreamAccess(FakeStreamClient(), "orders")
    assert access.list_shards("st") == [ShardInfo("a"), ShardInfo("b", "a"), ShardInfo("c", "a", "x")]
    assert access.get_shard_iterator("st", "b") == "st/b/0"
    batch = access.get_records("st/b/0", 10)
    assert batch.next_iterator is None and batch.records[0].table == "orders"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ts_errors.TrimmedDataError("trimmed", code="OTSTrimmedDataAccess"), TrimmedDataError),
        (ts_errors.ShardNotFoundError("no shard"), ShardNotFoundError),
        (ts_errors.ThrottledError("slow down"), StreamUnavailableError),
        (ts_errors.ServerBusyError("busy"), StreamUnavailableError),
        (ts_errors.ConnectionFailedError("reset"), StreamUnavailableError),
        (ts_errors.AuthError("bad key"), StreamError),
    ],
)
def test_client_errors_keep_their_meaning(error: Exception, expected: type[Exception]) -> None:
    access = TablestoreStreamAccess(FakeStreamClient(error), "orders")
    for call in (lambda: access.list_shards("st"), lambda: access.get_records("it", 5)):
        with pytest.raises(expected) as caught:
            call()
        assert not isinstance(caught.value, StreamUnavailableError) or expected is StreamUnavailableError
