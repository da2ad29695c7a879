"""Request checks (signature V2/V4, md5, date window), routing errors, malformed bodies and fault injection."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import time
from typing import Any

import pytest
from tablestore import (
    CapacityUnit,
    DefaultRetryPolicy,
    OTSClient,
    OTSServiceError,
    ReservedThroughput,
    Row,
    TableMeta,
    TableOptions,
)
from tablestore.auth import RequestContext

from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.emulator.signing import request_signature_string
from cdcbridge.harness.emulator_admin import EmulatorAdmin, EmulatorAdminError

from .conftest import sdk_client


class ImmediateRetry(DefaultRetryPolicy):
    """The SDK's default retry decisions without the back-off sleeps."""

    def get_retry_delay(self, retry_times: int, exception: Exception, api_name: str) -> float:
        return 0.0


@pytest.fixture(scope="module")
def table(client: OTSClient) -> str:
    client.create_table(
        TableMeta("checks", [("id", "INTEGER")]), TableOptions(), ReservedThroughput(CapacityUnit(0, 0))
    )
    return "checks"


def signed_request(client: OTSClient, api: str, *args: Any) -> tuple[str, dict[str, str], bytes]:
    """Headers and body exactly as the SDK would send them (its own signer)."""
    context = RequestContext(client.credentials_provider.get_credentials())
    return client.protocol.make_request(api, client._signer, context, *args)


def send(
    server: EmulatorServer, path: str, headers: dict[str, str], body: bytes, method: str = "POST"
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def error_message(body: bytes) -> str:
    import tablestore.protobuf.table_store_pb2 as pb2

    error = pb2.Error()
    error.ParseFromString(body)
    return error.message


def error_code(body: bytes) -> str:
    import tablestore.protobuf.table_store_pb2 as pb2

    error = pb2.Error()
    error.ParseFromString(body)
    return error.code


def test_wrong_secret_is_auth_failed(server: EmulatorServer) -> None:
    with pytest.raises(OTSServiceError) as raised:
        sdk_client(server, secret="not-the-secret").list_table()
    assert (raised.value.get_error_code(), raised.value.get_http_status()) == ("OTSAuthFailed", 403)


def test_v4_signing_works_and_is_checked(server: EmulatorServer, table: str) -> None:
    v4 = sdk_client(server, region="cn-hangzhou")
    assert table in v4.list_table()
    v4.put_row(table, Row([("id", 4)], [("v", 4)]))
    assert v4.get_row(table, [("id", 4)])[1].attribute_columns[0][1] == 4
    with pytest.raises(OTSServiceError) as raised:  # error answers are signed with the V4 key too (SDK checks it)
        v4.describe_table("no_such_table")
    assert (raised.value.get_error_code(), raised.value.get_http_status()) == ("OTSObjectNotExist", 404)
    with pytest.raises(OTSServiceError) as raised:
        sdk_client(server, secret="wrong", region="cn-hangzhou").list_table()
    assert raised.value.get_error_code() == "OTSAuthFailed"


def test_tampered_requests_are_rejected_unsigned(server: EmulatorServer, client: OTSClient) -> None:
    query, headers, body = signed_request(client, "ListTable")
    assert send(server, query, headers, body)[0] == 200
    status, response_headers, answer = send(server, query, headers, body + b"\x00")  # md5 no longer matches
    assert (status, error_code(answer)) == (403, "OTSAuthFailed")
    assert "authorization" not in response_headers  # auth failures are never signed
    for header in ("x-ots-signature", "x-ots-date", "x-ots-contentmd5", "x-ots-accesskeyid"):
        partial = {k: v for k, v in headers.items() if k != header}
        status, _, answer = send(server, query, partial, body)
        assert (status, error_code(answer)) == (403, "OTSAuthFailed"), header
    forged = dict(headers, **{"x-ots-instancename": "someone-else"})  # signed header changed after signing
    assert send(server, query, forged, body)[0] == 403


def test_stale_dates_are_rejected(server: EmulatorServer, client: OTSClient, monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime

    import tablestore.utils as sdk_utils

    old = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(minutes=16)
    monkeypatch.setattr(sdk_utils, "get_now_utc_datetime", lambda: old)
    query, headers, body = signed_request(client, "ListTable")  # correctly signed, 16 minutes old
    status, _, answer = send(server, query, headers, body)
    assert (status, error_code(answer)) == (403, "OTSAuthFailed")
    assert b"server time" in answer


def test_routing_errors(server: EmulatorServer, client: OTSClient) -> None:
    query, headers, body = signed_request(client, "ListSearchIndex", None)  # an SDK API the emulator lacks
    status, response_headers, answer = send(server, query, headers, body)
    assert (status, error_code(answer)) == (400, "OTSUnsupportOperation")
    assert response_headers["authorization"].startswith("OTS emulator-id:")
    query, headers, body = signed_request(client, "ListTable")
    status, _, answer = send(server, query, headers, body, method="GET")
    assert (status, error_code(answer)) == (405, "OTSMethodNotAllowed")


@pytest.mark.parametrize("api", ["tunnel/create", "tunnel/list", "tunnel/readrecords", "some/prefix/ListTable"])
def test_paths_with_segments_name_the_whole_api(server: EmulatorServer, client: OTSClient, api: str) -> None:
    """The Tunnel APIs live under /tunnel/...; the SDK signs the whole path, so the answer is "unsupported",
    signed like any answer, not a signature mismatch."""
    _, headers, body = signed_request(client, "ListTable")
    signature = hmac.new(b"emulator-secret", request_signature_string(api, headers).encode(), hashlib.sha1).digest()
    headers["x-ots-signature"] = base64.b64encode(signature).decode()  # signed over the whole path, as SDKs do
    status, response_headers, answer = send(server, "/" + api, headers, body)
    assert (status, error_code(answer)) == (400, "OTSUnsupportOperation")
    assert api in error_message(answer)
    assert response_headers["authorization"].startswith("OTS emulator-id:")


def test_malformed_protobuf_is_parameter_invalid(server: EmulatorServer, client: OTSClient) -> None:
    client.protocol.encoder.api_encode_map["DescribeTable"] = lambda name: _Raw(b"\xff\xff\xff")
    try:
        with pytest.raises(OTSServiceError) as raised:
            client.describe_table("x")
        assert (raised.value.get_error_code(), raised.value.get_http_status()) == ("OTSParameterInvalid", 400)
    finally:
        del client.protocol.encoder.api_encode_map["DescribeTable"]
        client.protocol.encoder.api_encode_map["DescribeTable"] = client.protocol.encoder._encode_describe_table


class _Raw:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:
        return self.data


def configure_faults(server: EmulatorServer, body: dict[str, Any]) -> tuple[int, Any]:
    """POST a raw faults body (valid or not): (HTTP status, answer or the error's code)."""
    try:
        return 200, EmulatorAdmin(server.url, timeout=10).request("POST", "faults", body)
    except EmulatorAdminError as error:
        return error.status or 0, {"error": str(error), "code": error.code}


@pytest.fixture
def faults(server: EmulatorServer) -> Any:
    yield lambda body: configure_faults(server, body)
    EmulatorAdmin(server.url).clear_faults()


def test_injected_throttling_and_retry(server: EmulatorServer, table: str, faults: Any) -> None:
    client = sdk_client(server, retry_policy=ImmediateRetry())
    faults({"rules": [{"api": "PutRow", "error_code": "OTSFlowControl", "count": 1}]})
    with pytest.raises(OTSServiceError) as raised:  # the SDK does not retry OTSFlowControl
        client.put_row(table, Row([("id", 1)], [("v", 1)]))
    assert (raised.value.get_error_code(), raised.value.get_http_status()) == ("OTSFlowControl", 429)
    assert client.get_row(table, [("id", 1)])[1] is None  # an injected error applies nothing
    client.put_row(table, Row([("id", 1)], [("v", 1)]))  # count exhausted
    status, body = faults({"rules": [{"api": "GetRow", "error_code": "OTSServerBusy", "count": 2}]})
    assert status == 200 and body["rules"][0]["count"] == 2
    assert client.get_row(table, [("id", 1)])[1] is not None  # retried twice by the SDK, then served
    assert EmulatorAdmin(server.url).faults() == []


def test_dropped_response_still_applies_the_write(server: EmulatorServer, table: str, faults: Any) -> None:
    client = sdk_client(server)
    faults({"rules": [{"api": "PutRow", "drop_response": True, "count": 1}]})
    with pytest.raises(Exception) as raised:
        client.put_row(table, Row([("id", 2)], [("v", "ambiguous")]))
    assert not isinstance(raised.value, OTSServiceError)  # a transport error: the client cannot know the outcome
    assert client.get_row(table, [("id", 2)])[1].attribute_columns[0][1] == "ambiguous"


def test_latency_and_probability(server: EmulatorServer, client: OTSClient, faults: Any) -> None:
    faults({"rules": [{"api": "ListTable", "latency_ms": 150}]})
    started = time.monotonic()
    client.list_table()
    assert time.monotonic() - started >= 0.15
    faults({"rules": [{"api": "ListTable", "error_code": "OTSFlowControl", "probability": 0.5}], "seed": 1})
    outcomes = []
    for _ in range(40):
        try:
            client.list_table()
            outcomes.append(True)
        except OTSServiceError:
            outcomes.append(False)
    assert 5 < outcomes.count(False) < 35


@pytest.mark.parametrize(
    "body",
    [
        {"rules": [{"api": "NoSuchApi", "latency_ms": 1}]},
        {"rules": [{"error_code": "busy"}]},
        {"rules": [{"error_code": "OTSServerBusy", "drop_response": True}]},
        {"rules": [{"latency_ms": 1, "probability": 0}]},
        {"rules": [{"latency_ms": 1, "count": 0}]},
        {"rules": [{}]},
        {"rules": [{"latency_ms": 1, "colour": "red"}]},
        {"rulez": []},
    ],
)
def test_invalid_fault_configs_are_rejected(faults: Any, body: dict[str, Any]) -> None:
    status, answer = faults(body)
    assert status == 400 and answer["error"]


def test_a_taken_port_is_a_clear_start_error(server: EmulatorServer) -> None:
    from cdcbridge.emulator.server import EmulatorStartError

    with pytest.raises(EmulatorStartError, match="--port"):
        EmulatorServer(port=server.port)
