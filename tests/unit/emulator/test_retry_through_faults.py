"""Every throttling, quota and busy code the service documents: the emulator's fault rules answer it with its real
HTTP status and message, and our client (build_ots_client + StreamRetryPolicy) retries it.

Codes that say "not executed, try later" are retried for every API, writes included. Codes that say "it may or may
not have happened" (OTSTimeout, OTSServerUnavailable, OTSInternalServerError) are retried for reads only: a write
that timed out may have been applied, and repeating an increment would apply it twice.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tablestore import CapacityUnit, OTSClient, OTSServiceError, ReservedThroughput, Row, TableMeta, TableOptions

from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.tablestore import StreamClient
from cdcbridge.tablestore.connection import build_ots_client
from cdcbridge.tablestore.retry import RETRIED_FOR_EVERY_API, RETRIED_FOR_READS, StreamRetryPolicy

#: (code, HTTP status, the service's message) as Alibaba's error-code page lists them.
NOT_EXECUTED = [
    ("OTSFlowControl", 429, "The requests have been throttled."),
    ("OTSServerBusy", 503, "Server is busy."),
    ("OTSPartitionUnavailable", 503, "The partition is not available."),
    ("OTSRowOperationConflict", 409, "Data is being modified by the other request."),
    ("OTSTableNotReady", 404, "The table is not ready."),
    ("OTSQuotaExhausted", 403, "Too frequent table operations."),
    ("OTSCapacityUnitExhausted", 403, "Capacity unit is not enough."),
    ("OTSNotEnoughCapacityUnit", 403, "Remaining capacity unit is not enough."),
    ("OTSTooFrequentReservedThroughputAdjustment", 403, "Capacity unit adjustment is too frequent."),
    ("OTSOperationThrottled", 403, "The operation has been throttled."),
]
MAYBE_EXECUTED = [
    ("OTSTimeout", 503, "Operation timeout."),
    ("OTSServerUnavailable", 503, "Server is not available."),
    ("OTSInternalServerError", 500, "Internal server error."),
]


@pytest.fixture(scope="module")
def ots(server: EmulatorServer) -> OTSClient:
    # Back-off capped at 1 ms: the delays themselves are checked in tests/unit/tablestore/test_retry.py.
    policy = StreamRetryPolicy(max_retry_times=5, max_retry_delay=0.001)
    client = build_ots_client(server.url, "any", "emulator-id", "emulator-secret", retry_policy=policy)
    client.create_table(
        TableMeta("retried", [("id", "INTEGER")]), TableOptions(), ReservedThroughput(CapacityUnit(0, 0))
    )
    return client


@pytest.fixture
def admin(server: EmulatorServer) -> Iterator[EmulatorAdmin]:
    admin = EmulatorAdmin(server.url, timeout=10)
    yield admin
    admin.clear_faults()


def inject(admin: EmulatorAdmin, api: str, code: str, count: int = 2) -> None:
    admin.request("POST", "faults", {"rules": [{"api": api, "error_code": code, "count": count}]})


def test_every_documented_code_is_covered() -> None:
    assert {code for code, _, _ in NOT_EXECUTED} <= RETRIED_FOR_EVERY_API
    assert {code for code, _, _ in MAYBE_EXECUTED} <= RETRIED_FOR_READS


@pytest.mark.parametrize(("code", "status", "message"), NOT_EXECUTED + MAYBE_EXECUTED)
def test_fault_rules_answer_with_the_real_status_and_message(
    server: EmulatorServer, admin: EmulatorAdmin, code: str, status: int, message: str
) -> None:
    raw = build_ots_client(server.url, "any", "emulator-id", "emulator-secret", retry_policy=NoRetry())
    inject(admin, "ListTable", code, count=1)
    with pytest.raises(OTSServiceError) as raised:
        raw.list_table()
    error = raised.value
    assert (error.get_error_code(), error.get_http_status(), error.get_error_message()) == (code, status, message)


@pytest.mark.parametrize("code", [code for code, _, _ in NOT_EXECUTED])
def test_not_executed_answers_are_retried_for_writes_and_reads(ots: OTSClient, admin: EmulatorAdmin, code: str) -> None:
    inject(admin, "PutRow", code)
    ots.put_row("retried", Row([("id", 1)], [("code", code)]))
    assert admin.faults() == []  # both injected answers were consumed: the call was tried three times
    inject(admin, "GetRow", code)
    assert ots.get_row("retried", [("id", 1)], max_version=1)[1].attribute_columns[0][1] == code
    assert admin.faults() == []


@pytest.mark.parametrize("code", [code for code, _, _ in MAYBE_EXECUTED])
def test_maybe_executed_answers_are_retried_for_reads_only(ots: OTSClient, admin: EmulatorAdmin, code: str) -> None:
    ots.put_row("retried", Row([("id", 2)], [("v", 1)]))
    inject(admin, "GetRow", code)
    assert ots.get_row("retried", [("id", 2)], max_version=1)[1] is not None
    assert admin.faults() == []
    inject(admin, "UpdateRow", code, count=1)
    with pytest.raises(OTSServiceError) as raised:
        ots.update_row("retried", Row([("id", 2)], {"increment": [("n", 1)]}), None)
    assert raised.value.get_error_code() == code


@pytest.mark.parametrize("code", ["OTSFlowControl", "OTSTimeout", "OTSServerBusy"])
def test_stream_reads_are_retried(server: EmulatorServer, ots: OTSClient, admin: EmulatorAdmin, code: str) -> None:
    streams = StreamClient(ots)
    inject(admin, "ListStream", code)
    assert streams.list_stream() is not None
    assert admin.faults() == []


def test_a_table_quota_is_not_retried(ots: OTSClient, admin: EmulatorAdmin) -> None:
    """OTSQuotaExhausted for the number of tables is permanent (the error-code page: not retryable)."""
    message = "Number of tables exceeds the quota:64."
    admin.request("POST", "faults", {"rules": [{"api": "ListTable", "error_code": "OTSQuotaExhausted",
                                                "error_message": message, "count": 2}]})  # fmt: skip
    with pytest.raises(OTSServiceError) as raised:
        ots.list_table()
    assert raised.value.get_error_message() == message
    assert len(admin.faults()) == 1  # tried once


class NoRetry(StreamRetryPolicy):
    def should_retry(self, retry_times: int, exception: OTSServiceError, api_name: str) -> bool:
        return False
