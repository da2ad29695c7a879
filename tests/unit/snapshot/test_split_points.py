"""Key ranges for the parallel export: the emulator's ComputeSplitPointsBySize (model and wire form) and the ranges
the snapshot derives from its answer, which must cover every key exactly once."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest
import tablestore.protobuf.table_store_pb2 as pb2
from tablestore import INF_MAX, INF_MIN, OTSServiceError

from cdcbridge.emulator.backend import Backend
from cdcbridge.emulator.conditions import Condition
from cdcbridge.emulator.errors import ParameterInvalid
from cdcbridge.emulator.keys import PkType, PrimaryKeyColumn
from cdcbridge.emulator.model import CellChange, Instance, RowChange, WriteKind
from cdcbridge.emulator.protocol import ProtocolHandler
from cdcbridge.snapshot import split_points
from cdcbridge.snapshot.errors import SplitPointsError
from cdcbridge.snapshot.split_points import KeyRange, key_ranges, split_point
from cdcbridge.tablestore.plainbuffer import encode_row

NOW_US = 1_700_000_000_000_000
PRIMARY_KEY = [PrimaryKeyColumn("region", PkType.STRING), PrimaryKeyColumn("id", PkType.INTEGER)]


def filled(instance: Instance, rows: int, *, value_bytes: int = 50) -> list[tuple[str, int]]:
    instance.create_table("t", PRIMARY_KEY, now_us=NOW_US)
    keys = []
    for i in range(rows):
        key = ("eu" if i % 3 else "us", i)
        change = RowChange(WriteKind.PUT, [("region", key[0]), ("id", key[1])],
                           [CellChange("v", value="x" * value_bytes)], Condition())  # fmt: skip
        instance.write_row("t", change, now_us=NOW_US + i)
        keys.append(key)
    return sorted(keys)


def keys_in(instance: Instance, key_range: KeyRange) -> list[tuple[str, int]]:
    """Keys a GetRange over the range returns (bounds in SDK form, translated for the model)."""
    from cdcbridge.emulator.model import ReadOptions
    from cdcbridge.tablestore import plainbuffer

    sentinel = {id(INF_MIN): plainbuffer.INF_MIN, id(INF_MAX): plainbuffer.INF_MAX}

    def model_bound(bound: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        return [(name, sentinel.get(id(value), value)) for name, value in bound]

    begin, end = model_bound(key_range.begin), model_bound(key_range.end)
    result = instance.get_range("t", forward=True, inclusive_start=begin, exclusive_end=end, read=ReadOptions(),
                                now_us=NOW_US)  # fmt: skip
    assert result.next_start_primary_key is None
    return [(view.primary_key[0][1], view.primary_key[1][1]) for view in result.rows]


class ProtocolClient:
    """Just enough of an SDK client for key_ranges: the registered encoder and decoder around the emulator's
    protocol layer (the wire bytes of both directions, without HTTP)."""

    def __init__(self, handler: ProtocolHandler) -> None:
        from tablestore.protocol import OTSProtocol

        self.protocol = OTSProtocol("id", "secret", None, "inst", "utf-8", None)
        self._handler = handler

    def _request_helper(self, api: str, *args: Any) -> Any:
        request = self.protocol.encoder.encode_request(api, *args)
        body = self._handler.handle(api, request.SerializeToString())
        return self.protocol.decoder.decode_response(api, body, "request-id")[0]


def test_split_points_cut_the_table_into_ranges_of_about_the_asked_size() -> None:
    instance = Instance()
    filled(instance, 300)
    result = instance.compute_split_points("t", 2_000)
    assert [column.name for column in result.primary_key] == ["region", "id"]
    assert 5 <= len(result.points) <= 15  # ~70 bytes a row, 300 rows, 2000 bytes a split
    assert result.points == sorted(result.points)
    assert instance.compute_split_points("t", 10**9).points == []  # everything fits one split
    with pytest.raises(ParameterInvalid):
        instance.compute_split_points("t", 0)


def test_the_ranges_cover_every_key_exactly_once() -> None:
    backend = Backend()
    expected = filled(backend.instance, 250)
    ranges = key_ranges(ProtocolClient(ProtocolHandler(backend)), "t", 1_500)
    assert len(ranges) > 3 and [r.index for r in ranges] == list(range(len(ranges)))
    assert ranges[0].begin == [("region", INF_MIN), ("id", INF_MIN)]
    assert ranges[-1].end == [("region", INF_MAX), ("id", INF_MAX)]
    assert all(a.end == b.begin for a, b in itertools.pairwise(ranges))
    scanned = [key for key_range in ranges for key in keys_in(backend.instance, key_range)]
    assert scanned == expected
    assert all(keys_in(backend.instance, key_range) for key_range in ranges)  # no empty range


def test_an_empty_table_is_one_range() -> None:
    backend = Backend()
    backend.instance.create_table("t", PRIMARY_KEY, now_us=NOW_US)
    ranges = key_ranges(ProtocolClient(ProtocolHandler(backend)), "t", 1_000)
    assert ranges == [KeyRange(0, [("region", INF_MIN), ("id", INF_MIN)], [("region", INF_MAX), ("id", INF_MAX)])]


def test_a_short_split_point_is_completed_with_minus_infinity() -> None:
    raw = encode_row([("region", "eu")])  # the service leaves trailing -inf columns out
    assert split_point(["region", "id"], raw, "t") == [("region", "eu"), ("id", INF_MIN)]
    with pytest.raises(SplitPointsError, match="do not match"):
        split_point(["zone", "id"], raw, "t")


def test_a_source_without_the_api_is_exported_as_one_range() -> None:
    class Unsupported:
        protocol = ProtocolClient(ProtocolHandler(Backend())).protocol

        def _request_helper(self, api: str, *args: Any) -> Any:
            raise OTSServiceError(400, "OTSUnsupportOperation", "no")

        def describe_table(self, table: str) -> Any:
            meta = SimpleNamespace(schema_of_primary_key=[("region", "STRING"), ("id", "INTEGER")])
            return SimpleNamespace(table_meta=meta)

    assert key_ranges(Unsupported(), "t", 1_000) == [
        KeyRange(0, [("region", INF_MIN), ("id", INF_MIN)], [("region", INF_MAX), ("id", INF_MAX)])
    ]


def test_other_service_errors_name_the_table() -> None:
    class Missing:
        protocol = ProtocolClient(ProtocolHandler(Backend())).protocol

        def _request_helper(self, api: str, *args: Any) -> Any:
            raise OTSServiceError(404, "OTSObjectNotExist", "Requested table does not exist.")

    with pytest.raises(SplitPointsError, match=r"table orders.*OTSObjectNotExist"):
        key_ranges(Missing(), "orders", 1_000)


def test_the_request_asks_for_exactly_the_configured_size() -> None:
    request = split_points._encode_request("t", 12_345)
    assert isinstance(request, pb2.ComputeSplitPointsBySizeRequest)
    assert (request.split_size, request.split_size_unit_in_byte) == (1, 12_345)
