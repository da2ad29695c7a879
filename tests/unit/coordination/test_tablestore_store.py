"""TablestoreLeaseStore request building and error mapping, without a server (SDK encoder + FakeOTSClient)."""

from __future__ import annotations

import pytest
import urllib3
import urllib3.connection
import urllib3.exceptions
from tablestore import OTSClientError, OTSServiceError
from tablestore.protobuf import table_store_filter_pb2 as filter_pb2
from tablestore.protobuf import table_store_pb2 as pb2

from cdcbridge.coordination import (
    CoordinationSettings,
    FakeClock,
    Lease,
    LeaseStoreError,
    LeaseStoreUnavailableError,
)
from cdcbridge.coordination.leases.tablestore_store import STATUS_TABLE_PRIMARY_KEY, TablestoreLeaseStore
from tests.unit.coordination.fake_ots import FakeOTSClient, decode_filter

STREAM = "stream-1"


def _store(client: FakeOTSClient | None = None) -> tuple[TablestoreLeaseStore, FakeOTSClient]:
    client = client or FakeOTSClient()
    store = TablestoreLeaseStore(client, "cdc_status", clock=FakeClock(), read_retries=2)
    return store, client


def test_ensure_table_creates_the_seed_schema_with_no_ttl_and_one_version() -> None:
    store, client = _store()
    store.ensure_table()
    _api, request = next(r for r in client.requests if r[0] == "CreateTable")
    assert [(c.name, c.type) for c in request.table_meta.primary_key] == [
        ("StreamId", pb2.STRING),
        ("StatusType", pb2.STRING),
        ("StatusValue", pb2.STRING),
    ]
    assert request.table_options.time_to_live == -1 and request.table_options.max_versions == 1
    assert client.schemas["cdc_status"] == STATUS_TABLE_PRIMARY_KEY
    store.ensure_table()  # second call: exists, schema checked, nothing created
    assert sum(1 for api, _ in client.requests if api == "CreateTable") == 1


def test_ensure_table_tolerates_a_racing_creator_and_waits_until_ready() -> None:
    store, client = _store()
    client.fail_next("GetRow", OTSServiceError(404, "OTSTableNotReady", "not ready"))
    client.fail_next("GetRow", OTSServiceError(503, "OTSServerUnavailable", "busy"))
    original = client.create_table

    def racing_create(*args: object) -> None:
        original(*args)  # someone else created it just before us
        original(*args)

    client.create_table = racing_create  # type: ignore[method-assign]
    store.ensure_table()
    assert "cdc_status" in client.tables


def test_ensure_table_refuses_a_table_with_another_key() -> None:
    store, client = _store()
    client.tables["cdc_status"] = {}
    client.schemas["cdc_status"] = [("id", "INTEGER")]
    with pytest.raises(LeaseStoreError, match="primary key"):
        store.ensure_table()


def test_lease_rows_use_the_status_primary_key_and_typed_columns() -> None:
    store, client = _store()
    store.ensure_table()
    store.create_lease_if_absent(Lease(STREAM, "shard-A", parent_shard_ids=("p1", "p2")))
    key = (STREAM, "LeaseKey", "shard-A")
    assert client.tables["cdc_status"][key] == {
        "LeaseOwner": "",
        "LeaseCounter": 0,
        "LeaseStealer": "",
        "Checkpoint": "TRIM_HORIZON",
        "ParentShardIds": "p1\np2\n",
    }
    api, request = client.requests[-1]
    assert api == "PutRow" and request.condition.row_existence == pb2.EXPECT_NOT_EXIST
    assert not request.condition.HasField("column_condition")


def test_renew_sends_expect_exist_and_counter_and_owner_equality_on_the_wire() -> None:
    store, client = _store()
    store.ensure_table()
    store.create_lease_if_absent(Lease(STREAM, "shard-A"))
    lease = store.take(Lease(STREAM, "shard-A"), "worker-1")
    store.renew(lease)
    api, request = client.requests[-1]
    assert api == "UpdateRow"
    assert request.condition.row_existence == pb2.EXPECT_EXIST
    assert decode_filter(request.condition.column_condition) == {
        "and": [
            {
                "column": "LeaseCounter",
                "comparator": filter_pb2.CT_EQUAL,
                "value": 1,
                "pass_if_missing": False,
                "latest_version_only": True,
            },
            {
                "column": "LeaseOwner",
                "comparator": filter_pb2.CT_EQUAL,
                "value": "worker-1",
                "pass_if_missing": False,
                "latest_version_only": True,
            },
        ]
    }


def test_take_conditions_on_the_observed_counter_only() -> None:
    store, client = _store()
    store.ensure_table()
    store.create_lease_if_absent(Lease(STREAM, "shard-A"))
    store.take(Lease(STREAM, "shard-A"), "worker-1")
    _, request = client.requests[-1]
    assert request.condition.row_existence == pb2.EXPECT_EXIST
    single = decode_filter(request.condition.column_condition)
    assert (single["column"], single["value"], single["pass_if_missing"]) == ("LeaseCounter", 0, False)


def test_steal_request_accepts_a_missing_stealer_column_like_the_java_client() -> None:
    store, client = _store()
    store.ensure_table()
    # A row as the Java client could leave it, without LeaseStealer.
    client.tables["cdc_status"][(STREAM, "LeaseKey", "shard-J")] = {
        "LeaseOwner": "java-worker",
        "LeaseCounter": 17,
        "Checkpoint": "opaque-iterator",
        "ParentShardIds": "",
    }
    lease = store.get_lease(STREAM, "shard-J")
    assert lease == Lease(STREAM, "shard-J", counter=17, owner="java-worker", checkpoint="opaque-iterator")
    store.request_steal(lease, "py-worker")
    _, request = client.requests[-1]
    conditions = decode_filter(request.condition.column_condition)["and"]
    stealer = next(c for c in conditions if c["column"] == "LeaseStealer")
    assert stealer["value"] == "" and stealer["pass_if_missing"] is True
    assert client.tables["cdc_status"][(STREAM, "LeaseKey", "shard-J")]["LeaseStealer"] == "py-worker"


def test_rows_without_a_counter_are_not_leases() -> None:
    store, client = _store()
    store.ensure_table()
    client.tables["cdc_status"][(STREAM, "LeaseKey", "partial")] = {"LeaseOwner": "x"}
    store.create_lease_if_absent(Lease(STREAM, "ok"))
    assert [lease.shard_id for lease in store.list_leases(STREAM)] == ["ok"]


@pytest.mark.parametrize(
    "error",
    [
        OTSServiceError(503, "OTSServerUnavailable", "unavailable"),
        OTSServiceError(500, "OTSInternalServerError", "boom"),
        OTSClientError("MD5 mismatch in response.", 200),
        urllib3.exceptions.ReadTimeoutError(None, "/UpdateRow", "read timed out"),
        ConnectionResetError("reset by peer"),
    ],
)
def test_transport_failures_of_a_write_are_resolved_by_reading_back(error: Exception) -> None:
    store, client = _store()
    store.ensure_table()
    store.create_lease_if_absent(Lease(STREAM, "s"))
    lease = store.take(Lease(STREAM, "s"), "w1")
    client.fail_next("UpdateRow", error, applied=True)
    assert store.renew(lease).counter == 2
    client.fail_next("UpdateRow", error, applied=False)
    with pytest.raises(LeaseStoreUnavailableError):
        store.renew(lease.evolve(counter=2))


def test_request_errors_are_reported_not_retried() -> None:
    store, client = _store()
    store.ensure_table()
    store.create_lease_if_absent(Lease(STREAM, "s"))
    client.fail_next("UpdateRow", OTSServiceError(403, "OTSAuthFailed", "bad signature"))
    with pytest.raises(LeaseStoreError, match="credentials") as caught:
        store.take(Lease(STREAM, "s"), "w1")
    assert not isinstance(caught.value, LeaseStoreUnavailableError)
    client.fail_next("GetRange", OTSClientError("invalid column"))  # no http status: our request was malformed
    with pytest.raises(LeaseStoreError):
        store.list_leases(STREAM)


def test_reads_retry_transport_errors_then_give_up() -> None:
    store, client = _store()
    store.ensure_table()
    client.fail_next("GetRow", OTSServiceError(503, "OTSServerBusy", "busy"))
    assert store.get_lease(STREAM, "nothing") is None
    for _ in range(3):
        client.fail_next("GetRow", OTSServiceError(503, "OTSServerBusy", "busy"))
    with pytest.raises(LeaseStoreUnavailableError, match="3 tries"):
        store.get_lease(STREAM, "nothing")


class _SleepRecordingClock(FakeClock):
    """A FakeClock that keeps every back-off the store asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        super().sleep(seconds)


def _count_calls(client: FakeOTSClient, method: str) -> list[int]:
    """Wrap `client.<method>` so failed attempts are counted too (the fake records only answered reads)."""
    attempts = [0]
    original = getattr(client, method)

    def counted(*args: object, **kwargs: object) -> object:
        attempts[0] += 1
        return original(*args, **kwargs)

    setattr(client, method, counted)
    return attempts


def _configured_store(**settings: float) -> tuple[TablestoreLeaseStore, FakeOTSClient, _SleepRecordingClock]:
    client, clock = FakeOTSClient(), _SleepRecordingClock()
    configured = CoordinationSettings(status_table="cdc_status", **settings)  # type: ignore[arg-type]
    store = TablestoreLeaseStore.from_settings(client, configured, clock=clock)
    store.ensure_table()
    clock.sleeps.clear()
    return store, client, clock


@pytest.mark.parametrize(
    ("settings", "attempts", "sleeps"),
    [
        ({"store_read_retries": 2, "store_retry_backoff_seconds": 0.5, "store_retry_backoff_cap_seconds": 0.8}, 3,
         [0.5, 0.8]),
        ({"store_read_retries": 4, "store_retry_backoff_seconds": 0.25, "store_retry_backoff_cap_seconds": 0.6}, 5,
         [0.25, 0.5, 0.6, 0.6]),
        ({"store_read_retries": 0}, 1, []),
    ],
)  # fmt: skip
def test_from_settings_reads_with_the_configured_retries_and_back_off(
    settings: dict[str, float], attempts: int, sleeps: list[float]
) -> None:
    store, client, clock = _configured_store(**settings)
    assert store.table_name == "cdc_status"
    tries = _count_calls(client, "get_row")
    for _ in range(attempts + 5):  # more failures than the store will try
        client.fail_next("GetRow", OTSServiceError(503, "OTSServerBusy", "busy"))
    with pytest.raises(LeaseStoreUnavailableError, match=f"{attempts} tries"):
        store.get_lease(STREAM, "shard-A")
    assert tries[0] == attempts
    assert clock.sleeps == sleeps


def test_from_settings_store_recovers_when_a_retry_gets_an_answer() -> None:
    store, client, clock = _configured_store(
        store_read_retries=3, store_retry_backoff_seconds=0.2, store_retry_backoff_cap_seconds=5.0
    )
    store.create_lease_if_absent(Lease(STREAM, "shard-A"))
    tries = _count_calls(client, "get_range")
    for _ in range(2):
        client.fail_next("GetRange", ConnectionResetError("reset by peer"))
    assert [lease.shard_id for lease in store.list_leases(STREAM)] == ["shard-A"]
    assert tries[0] == 3
    assert clock.sleeps == [0.2, 0.4]


def test_an_unreachable_status_table_says_where_and_why_without_urllib3s_repr() -> None:
    refused = urllib3.exceptions.NewConnectionError(
        urllib3.connection.HTTPConnection("127.0.0.1", 8900), "Failed to establish a new connection: refused"
    )
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    unreachable = urllib3.exceptions.MaxRetryError(urllib3.HTTPConnectionPool("127.0.0.1", 8900), "/x", refused)

    class Unreachable(FakeOTSClient):
        def describe_table(self, table_name: str) -> object:
            raise unreachable

    with pytest.raises(LeaseStoreUnavailableError) as caught:
        TablestoreLeaseStore(Unreachable(), "cdc_status", clock=FakeClock()).ensure_table()
    assert str(caught.value) == (
        "could not describe the status table ('cdc_status'): cannot reach Tablestore at http://127.0.0.1:8900 "
        "(connection refused)"
    )
    assert caught.value.__cause__ is unreachable
