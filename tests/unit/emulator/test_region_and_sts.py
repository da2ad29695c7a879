"""Region and STS checks: configured, they catch credential mistakes locally; by default everything works as before."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tablestore import OTSClient, OTSServiceError

from cdcbridge.emulator.server import EmulatorServer

TOKEN = "CAIS-temporary-token-1234"


@pytest.fixture(scope="module")
def hangzhou() -> Iterator[EmulatorServer]:
    with EmulatorServer(region="cn-hangzhou") as server:
        yield server


@pytest.fixture(scope="module")
def with_sts() -> Iterator[EmulatorServer]:
    with EmulatorServer(sts_token=TOKEN) as server:
        yield server


def client(server: EmulatorServer, **kwargs: object) -> OTSClient:
    return OTSClient(
        server.url, "emulator-id", "emulator-secret", "instance", logger_name="tablestore-test-client", **kwargs
    )


def refusal(call: object) -> tuple[str, int, str]:
    with pytest.raises(OTSServiceError) as raised:
        call()  # type: ignore[operator]
    return raised.value.get_error_code(), raised.value.get_http_status(), raised.value.get_error_message()


def test_a_configured_region_refuses_v4_signatures_for_other_regions(hangzhou: EmulatorServer) -> None:
    assert client(hangzhou, region="cn-hangzhou").list_table() == ()
    code, status, message = refusal(client(hangzhou, region="cn-shanghai").list_table)
    assert (code, status) == ("OTSAuthFailed", 403)
    assert message.startswith("Signature mismatch") and "cn-shanghai" in message and "cn-hangzhou" in message
    assert client(hangzhou).list_table() == ()  # V2 signatures carry no region


def test_without_a_configured_region_any_region_signs(server: EmulatorServer) -> None:
    for region in ("cn-hangzhou", "ap-southeast-1"):
        assert isinstance(client(server, region=region).list_table(), tuple)


def test_sts_tokens_are_refused_unless_configured(server: EmulatorServer) -> None:
    code, status, message = refusal(client(server, sts_token=TOKEN).list_table)
    assert (code, status) == ("OTSAuthFailed", 403) and "--sts-token" in message
    assert TOKEN not in message


def test_a_configured_sts_token_must_be_sent_and_match(with_sts: EmulatorServer) -> None:
    assert client(with_sts, sts_token=TOKEN).list_table() == ()
    assert client(with_sts, sts_token=TOKEN, region="cn-hangzhou").list_table() == ()
    for wrong in ({"sts_token": "CAIS-another-token"}, {}):
        code, status, message = refusal(client(with_sts, **wrong).list_table)
        assert (code, status) == ("OTSAuthFailed", 403) and "STS token" in message
        assert TOKEN not in message and "another" not in message
