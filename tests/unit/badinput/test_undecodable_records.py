"""A stream page holding a record that cannot be decoded (bad CRC, truncated, unknown tag, unknown cell type), seen by
a running worker through the real client's decode and error mapping: the error names the table, the shard, the
record and the fix; the shard's checkpoint does not move past the record; the worker and its other shards go on;
and once the page decodes (a transient corruption, or check_crc turned off) every record arrives, none skipped."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from cdcbridge.coordination import WorkerState
from cdcbridge.coordination.stream.access import RecordBatch
from cdcbridge.coordination.stream.simulator import StreamSimulator
from cdcbridge.coordination.stream.tablestore_access import TablestoreStreamAccess
from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.connection import build_ots_client
from cdcbridge.tablestore.plainbuffer import encode_row
from cdcbridge.tablestore.proto import stream_pb2
from tests.unit.coordination.helpers import Cluster
from tests.unit.plainbuffer import handmade as hm

GOOD = encode_row([("pk", "k1")], [("v", 1, 1000)], sequence=(1, 5, 0))


def _flip_row_checksum(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def _unknown_tag(data: bytes) -> bytes:
    return data[:-2] + b"\x20" + data[-1:]  # where TAG_ROW_CHECKSUM belongs


def _unknown_cell_type(_: bytes) -> bytes:
    """A data cell of cell type 0x02, which no Tablestore release writes (hand-built: our writer cannot)."""
    return hm.HEADER + hm.row([hm.cell("pk", hm.v_str("k1"))], [hm.cell("v", hm.v_int(1), cell_type=2)])


CORRUPTIONS = {
    "row checksum": (_flip_row_checksum, "row checksum mismatch"),
    "truncated": (lambda data: data[: len(data) // 2], "truncated"),
    "unknown tag": (_unknown_tag, "unknown tag 0x20"),
    "unknown cell type": (_unknown_cell_type, "unknown cell type 0x02 in cell 'v'"),
}


def _decode_error(corrupt: bytes, table: str) -> Exception:
    """The error the real client raises for this record: StreamClient's decode, then TablestoreStreamAccess's map."""
    client = StreamClient(build_ots_client("http://127.0.0.1:1", "inst", "id", "secret"))

    class PageWithTheRecord:
        def get_stream_record(self, iterator: str, limit: int, *, table: str) -> Any:
            item = stream_pb2.GetStreamRecordResponse.StreamRecord(action_type=stream_pb2.PUT_ROW, record=corrupt)
            client._decode(item, table=table, shard_id="", record_index=3)

    try:
        TablestoreStreamAccess(PageWithTheRecord(), table).get_records("it", 100)
    except Exception as error:
        return error
    raise AssertionError("the corrupt record decoded")


class CorruptOnce:
    """A stream whose page holding one record of one shard fails to decode while `corrupt` is set."""

    def __init__(self, stream: StreamSimulator, shard_id: str, index: int, error: Exception) -> None:
        self._stream = stream
        self._shard_id, self._index, self._error = shard_id, index, error
        self.corrupt = True
        self.failed_fetches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def get_records(self, iterator: str, limit: int) -> RecordBatch:
        shard_id, _, position = iterator.rpartition("@")
        covers = shard_id == self._shard_id and int(position) <= self._index < int(position) + limit
        if self.corrupt and covers:
            self.failed_fetches += 1
            raise self._error
        return self._stream.get_records(iterator, limit)


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_an_undecodable_record_holds_its_shard_at_the_checkpoint_and_nothing_is_skipped(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="cdcbridge")
    corrupt, reason = CORRUPTIONS[kind]
    error = _decode_error(corrupt(GOOD), table="orders")
    assert reason in str(error) and "table orders" in str(error) and "record #3" in str(error)
    assert "Re-read from the last checkpoint" in str(error) and "check_crc=False" in str(error)

    cluster = Cluster(shard_count=2)
    for i in range(40):
        cluster.stream.put(f"k{i}")
    bad = CorruptOnce(cluster.stream, "s1", index=3, error=error)
    cluster.stream = bad  # type: ignore[assignment]
    cluster.add_worker("w1")
    cluster.run_for(60)

    delivered = set(cluster.journal.delivered_sequences())
    assert delivered == {r.sequence for r in bad.records_of("s0")}  # the healthy shard is done
    assert cluster.leases()["s1"].checkpoint_seq is None  # not moved: the page never decoded
    assert cluster.workers["w1"].state is WorkerState.RUNNING and bad.failed_fetches > 1
    said = [r.getMessage() for r in caplog.records if "shard s1" in r.getMessage()]
    assert said and reason in said[0] and "cannot be decoded" in said[0]

    bad.corrupt = False  # a transient corruption, or the operator turned check_crc off for a checksum error
    cluster.run_until(lambda: set(cluster.journal.delivered_sequences()) == {r.sequence for r in bad.history})
    assert cluster.leases()["s1"].owner == "w1"
