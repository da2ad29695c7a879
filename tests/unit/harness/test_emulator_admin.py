"""The emulator admin client against a real emulator served from this process (model, routes and JSON included)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from tablestore import CapacityUnit, OTSClient, OTSServiceError, ReservedThroughput, Row, TableMeta, TableOptions

from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.emulator_admin import EmulatorAdmin, EmulatorAdminError
from cdcbridge.harness.processes import free_port
from cdcbridge.tablestore import StreamClient, build_ots_client


@pytest.fixture
def server() -> Iterator[EmulatorServer]:
    logging.getLogger("tablestore-admin-test").setLevel(logging.CRITICAL)
    emulator = EmulatorServer().start()
    yield emulator
    emulator.stop()


@pytest.fixture
def admin(server: EmulatorServer) -> EmulatorAdmin:
    return EmulatorAdmin(server.url + "/", timeout=10)  # a trailing slash is tolerated


def _client(server: EmulatorServer) -> OTSClient:
    return build_ots_client(server.url, "cdcbridge", "emulator-id", "emulator-secret",
                            logger_name="tablestore-admin-test")  # fmt: skip


def _stream_table(server: EmulatorServer, name: str = "t") -> tuple[StreamClient, str]:
    streams = StreamClient(_client(server))
    streams.create_table_with_stream(
        TableMeta(name, [("id", "INTEGER")]), TableOptions(time_to_live=-1, max_version=1),
        ReservedThroughput(CapacityUnit(0, 0)), 24,
    )  # fmt: skip
    return streams, streams.describe_table_stream(name).stream_id


def test_health_and_stats(server: EmulatorServer, admin: EmulatorAdmin) -> None:
    assert admin.health() == {"status": "ok", "tables": 0}
    _stream_table(server)
    assert admin.health()["tables"] == 1
    stats = admin.stats()
    assert stats["CreateTable"]["calls"] == 1 and stats["CreateTable"]["seconds"] >= 0


def test_split_merge_and_trim_reshape_the_stream(server: EmulatorServer, admin: EmulatorAdmin) -> None:
    streams, stream_id = _stream_table(server)
    (root,) = [shard.shard_id for shard in streams.list_all_shards(stream_id)]
    left, right = admin.split("t", root)
    shards = {shard.shard_id: shard for shard in streams.list_all_shards(stream_id)}
    assert set(shards) == {root, left, right} and shards[left].parent_id == root

    child = admin.merge("t", left, right)
    merged = next(shard for shard in streams.list_all_shards(stream_id) if shard.shard_id == child)
    assert (merged.parent_id, merged.parent_sibling_id) == (left, right)

    ots = _client(server)
    for i in range(3):
        ots.put_row("t", Row([("id", i)], [("v", i)]))
    assert admin.trim("t", 0) == 0  # nothing is older than the epoch
    assert admin.trim("t", 2**62) == 3
    assert admin.trim("t", 2**62) == 0


def test_fault_rules_are_set_listed_appended_and_cleared(server: EmulatorServer, admin: EmulatorAdmin) -> None:
    assert admin.faults() == []
    rules = admin.set_faults([{"api": "ListTable", "error_code": "OTSServerBusy", "count": 1}], seed=3)
    assert [(r["api"], r["error_code"], r["count"]) for r in rules] == [("ListTable", "OTSServerBusy", 1)]
    rules = admin.set_faults([{"api": "GetRow", "latency_ms": 5}], append=True)
    assert [r["api"] for r in rules] == ["ListTable", "GetRow"]
    assert [r["api"] for r in admin.faults()] == ["ListTable", "GetRow"]
    plain = OTSClient(server.url, "emulator-id", "emulator-secret", "i", logger_name="tablestore-admin-test")
    plain.retry_policy.max_retry_times = 0
    with pytest.raises(OTSServiceError):  # the rule is in force on the Tablestore protocol
        plain.list_table()
    assert [r["api"] for r in admin.faults()] == ["GetRow"]  # the one-shot rule is used up
    assert admin.set_faults([{"api": "PutRow", "latency_ms": 1}]) == admin.faults()  # replaces, not appends
    admin.clear_faults()
    assert admin.faults() == []


def test_a_refused_call_carries_the_status_and_code_of_the_json_error(admin: EmulatorAdmin) -> None:
    with pytest.raises(EmulatorAdminError) as raised:
        admin.split("missing", "x")
    assert raised.value.status == 404 and raised.value.code == "OTSObjectNotExist"
    assert str(raised.value).startswith("POST /_emulator/split failed (404): ")
    with pytest.raises(EmulatorAdminError) as raised:
        admin.set_faults([{"api": "NoSuchApi", "latency_ms": 1}])
    assert (raised.value.status, raised.value.code) == (400, "BadRequest")
    assert "NoSuchApi" in str(raised.value)
    with pytest.raises(EmulatorAdminError) as raised:
        admin.request("GET", "nothing")
    assert (raised.value.status, raised.value.code) == (404, "NotFound")


def test_an_emulator_that_does_not_answer_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EmulatorAdminError, match=f"the emulator at {url} did not answer GET health") as raised:
        EmulatorAdmin(url, timeout=2).health()
    assert raised.value.status is None and raised.value.code is None
