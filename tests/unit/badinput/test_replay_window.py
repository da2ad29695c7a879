"""The emulator's replay window: a correctly signed request (V2 or V4) is accepted within 15 minutes of the server
clock and refused outside it, in the past (a replay) and in the future alike; the refusal names the skew, never the
secret. Requests are signed by the official SDK's own signers; the verifier runs on an injected clock."""

from __future__ import annotations

import datetime
import http.client
from typing import Any

import pytest
import tablestore.protobuf.table_store_pb2 as pb2
import tablestore.utils as sdk_utils
from tablestore import OTSClient
from tablestore.auth import RequestContext

from cdcbridge.emulator.errors import AuthFailed
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.emulator.signing import MAX_CLOCK_SKEW_S, RequestVerifier, _parse_request_date
from cdcbridge.tablestore.connection import build_ots_client

ACCESS_KEY_ID = "replay-id"
SECRET = "replay-secret-9f3"


def _client(url: str, signing: str) -> OTSClient:
    region = "cn-hangzhou" if signing == "V4" else None
    return build_ots_client(url, "inst", ACCESS_KEY_ID, SECRET, region=region)


def _signed(client: OTSClient) -> tuple[str, dict[str, str], bytes]:
    context = RequestContext(client.credentials_provider.get_credentials())
    query, headers, body = client.protocol.make_request("ListTable", client._signer, context)
    return query, {name.lower(): value for name, value in headers.items()}, body


def _verify_at(headers: dict[str, str], body: bytes, skew_seconds: float) -> Any:
    sent_at = _parse_request_date(headers["x-ots-date"])
    verifier = RequestVerifier({ACCESS_KEY_ID: SECRET}, clock_s=lambda: sent_at + skew_seconds)
    return verifier.verify("ListTable", headers, body)


@pytest.mark.parametrize("signing", ["V2", "V4"])
def test_the_same_signed_request_is_accepted_inside_the_window_and_refused_outside(signing: str) -> None:
    _, headers, body = _signed(_client("http://127.0.0.1:1", signing))
    assert ("x-ots-signaturev4" in headers) is (signing == "V4")
    for inside in (0, 60, MAX_CLOCK_SKEW_S - 1, -(MAX_CLOCK_SKEW_S - 1)):
        assert _verify_at(headers, body, inside).access_key_id == ACCESS_KEY_ID
    for outside in (MAX_CLOCK_SKEW_S + 60, -(MAX_CLOCK_SKEW_S + 60), 86_400):
        with pytest.raises(AuthFailed) as refused:
            _verify_at(headers, body, outside)
        assert "away from the server time" in str(refused.value) and f"at most {MAX_CLOCK_SKEW_S} s" in str(
            refused.value
        )
        assert SECRET not in str(refused.value)


@pytest.mark.parametrize("signing", ["V2", "V4"])
def test_a_replayed_request_is_refused_by_the_running_emulator(signing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    server = EmulatorServer(credentials={ACCESS_KEY_ID: SECRET}).start()
    try:
        client = _client(server.url, signing)
        stale = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(minutes=16)
        monkeypatch.setattr(sdk_utils, "get_now_utc_datetime", lambda: stale)
        query, headers, body = _signed(client)  # signed 16 minutes ago, as a captured request replayed now
        monkeypatch.undo()
        fresh_query, fresh_headers, fresh_body = _signed(client)
        assert _send(server, fresh_query, fresh_headers, fresh_body)[0] == 200
        status, answer = _send(server, query, headers, body)
        error = pb2.Error()
        error.ParseFromString(answer)
        assert (status, error.code) == (403, "OTSAuthFailed") and "server time" in error.message
    finally:
        server.stop()


def _send(server: EmulatorServer, query: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        connection.request("POST", query, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()
