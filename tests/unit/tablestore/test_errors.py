"""SDK errors become one typed family whose messages say what to do and never carry credentials."""

from __future__ import annotations

import socket
import traceback

import pytest
from tablestore.error import OTSClientError, OTSServiceError
from urllib3 import HTTPConnectionPool
from urllib3.connection import HTTPConnection
from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NameResolutionError, ReadTimeoutError

from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.connection import build_ots_client
from cdcbridge.tablestore.errors import (
    AuthError,
    ClientConfigError,
    ConnectionFailedError,
    InvalidRequestError,
    ServerBusyError,
    ShardNotFoundError,
    StreamError,
    StreamNotFoundError,
    StreamServiceError,
    TableNotFoundError,
    ThrottledError,
    TrimmedDataError,
    map_sdk_error,
    transport_failure,
)
from tests.unit.tablestore.conftest import ACCESS_KEY_ID, ACCESS_KEY_SECRET
from tests.unit.tablestore.fake_tablestore import FakeTablestore, error_reply


def _service(code: str, message: str = "", status: int = 400) -> OTSServiceError:
    return OTSServiceError(status, code, message, "req-1")


@pytest.mark.parametrize(
    ("error", "api", "context", "expected"),
    [
        (_service("OTSTrimmedDataAccess", "already trimmed", 404), "GetStreamRecord", {}, TrimmedDataError),
        (_service("OTSAuthFailed", "Signature mismatch.", 403), "ListStream", {}, AuthError),
        (_service("OTSFlowControl", "", 429), "GetStreamRecord", {}, ThrottledError),
        (_service("OTSNotEnoughCapacityUnit", "", 403), "GetStreamRecord", {}, ThrottledError),
        (_service("OTSServerBusy", "", 503), "GetStreamRecord", {}, ServerBusyError),
        (_service("OTSPartitionUnavailable", "", 503), "DescribeStream", {}, ServerBusyError),
        (_service("SomethingNew", "", 502), "DescribeStream", {}, ServerBusyError),
        (
            _service("OTSObjectNotExist", "Requested stream does not exist.", 404),
            "DescribeStream",
            {"stream_id": "s1"},
            StreamNotFoundError,
        ),
        (
            _service("OTSObjectNotExist", "Requested shard does not exist.", 404),
            "GetShardIterator",
            {"stream_id": "s1", "shard_id": "x"},
            ShardNotFoundError,
        ),
        (
            _service("OTSParameterInvalid", "Shard x not found"),
            "GetShardIterator",
            {"stream_id": "s1", "shard_id": "x"},
            ShardNotFoundError,
        ),
        (
            _service("OTSParameterInvalid", "Stream s1 does not exist"),
            "DescribeStream",
            {"stream_id": "s1"},
            StreamNotFoundError,
        ),
        (
            _service("OTSObjectNotExist", "Requested table does not exist.", 404),
            "DescribeTable",
            {"table": "t"},
            TableNotFoundError,
        ),
        (_service("OTSParameterInvalid", "Invalid shard iterator."), "GetStreamRecord", {}, InvalidRequestError),
        (_service("OTSParameterInvalid", "limit must be positive"), "GetStreamRecord", {}, InvalidRequestError),
        (_service("OTSConditionCheckFail", "Condition check failed.", 403), "UpdateTable", {}, StreamServiceError),
        (OTSClientError("MD5 mismatch in response.", 200), "ListStream", {}, ConnectionFailedError),
        (MaxRetryError(None, "/ListStream", "refused"), "ListStream", {}, ConnectionFailedError),
    ],
)
def test_sdk_errors_map_to_typed_errors(
    error: Exception, api: str, context: dict[str, str], expected: type[StreamError]
) -> None:
    mapped = map_sdk_error(error, api=api, **context)
    assert type(mapped) is expected
    assert api in str(mapped)


def test_service_details_are_kept() -> None:
    mapped = map_sdk_error(_service("OTSTrimmedDataAccess", "gone", 404), api="GetStreamRecord", shard_id="sh")
    assert (mapped.code, mapped.http_status, mapped.request_id) == ("OTSTrimmedDataAccess", 404, "req-1")
    assert "shard sh" in str(mapped)
    assert "Restart the shard from its oldest record" in str(mapped)
    assert not mapped.retryable


def test_only_transient_errors_are_retryable() -> None:
    assert ThrottledError("x").retryable and ServerBusyError("x").retryable and ConnectionFailedError("x").retryable
    assert not TrimmedDataError("x").retryable and not AuthError("x").retryable


def test_a_mapped_error_is_returned_as_is() -> None:
    original = TrimmedDataError("gone")
    assert map_sdk_error(original, api="GetStreamRecord") is original


def _full_text(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)) + repr(error) + str(vars(error))


def test_a_wrong_secret_is_an_auth_error_that_does_not_leak_it(fake: FakeTablestore) -> None:
    wrong_secret = "wrong-secret-must-not-appear"
    client = StreamClient(build_ots_client(fake.url, "cdcbridge", ACCESS_KEY_ID, wrong_secret))
    with pytest.raises(AuthError, match="access key id and secret") as caught:
        client.list_stream()
    text = _full_text(caught.value)
    assert wrong_secret not in text
    assert ACCESS_KEY_SECRET not in text
    assert len(fake.seen("ListStream")) == 1, "auth failures are not retried"


def test_a_server_side_error_does_not_leak_the_secret(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("DescribeStream", error_reply(404, "OTSObjectNotExist", "Requested stream does not exist."))
    with pytest.raises(StreamNotFoundError, match="stream s-404 does not exist") as caught:
        stream_client.describe_stream("s-404")
    assert ACCESS_KEY_SECRET not in _full_text(caught.value)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_endpoint_is_a_connection_error() -> None:
    """One sentence naming the endpoint and the fix, never urllib3's MaxRetryError(HTTPConnectionPool(...)) repr."""
    port = _closed_port()
    client = StreamClient(
        build_ots_client(f"http://127.0.0.1:{port}", "cdcbridge", ACCESS_KEY_ID, ACCESS_KEY_SECRET),
        sleep=lambda _: None,
    )
    with pytest.raises(ConnectionFailedError) as caught:
        client.list_stream("t")
    assert caught.value.retryable
    assert str(caught.value) == (
        f"cannot reach Tablestore at http://127.0.0.1:{port} (connection refused) during ListStream on table t; "
        "check the endpoint and that Tablestore runs there, then retry"
    )
    assert "MaxRetryError" not in repr(caught.value) and "HTTPConnection" not in str(caught.value)
    assert ACCESS_KEY_SECRET not in _full_text(caught.value)


@pytest.mark.parametrize(
    ("endpoint", "instance", "key_id", "secret", "message"),
    [
        ("", "inst", "id", "s3cr3t-value", "endpoint is empty"),
        ("http://h", "", "id", "s3cr3t-value", "instance name is empty"),
        ("http://h", "inst", "", "s3cr3t-value", "access key id is empty"),
        ("http://h", "inst", "id", "", "access key secret is empty"),
        ("ftp://h", "inst", "id", "s3cr3t-value", "protocol of end_point must be"),
    ],
)
def test_unusable_client_settings_are_config_errors(
    endpoint: str, instance: str, key_id: str, secret: str, message: str
) -> None:
    with pytest.raises(ClientConfigError, match=message) as caught:
        build_ots_client(endpoint, instance, key_id, secret)
    if secret:
        assert secret not in _full_text(caught.value)


_POOL = HTTPConnectionPool("ots.example", 8900)
_CONN = HTTPConnection("ots.example", 8900)


@pytest.mark.parametrize(
    ("error", "described"),
    [
        (MaxRetryError(_POOL, "/x", NameResolutionError("ots.example", _CONN, socket.gaierror(-2, "Name or service "
                                                                                                 "not known"))),
         "cannot reach Tablestore at http://ots.example:8900 (host name not found)"),
        (MaxRetryError(_POOL, "/x", ConnectTimeoutError(_CONN, "timed out")),
         "cannot reach Tablestore at http://ots.example:8900 (connection timed out)"),
        (ReadTimeoutError(_POOL, "/x", "read timed out"),
         "lost the connection to Tablestore at http://ots.example:8900 (no answer within the socket timeout)"),
        (ConnectionResetError(104, "Connection reset by peer"),
         "lost the connection to Tablestore (Connection reset by peer)"),
        (OTSServiceError(403, "OTSAuthFailed", "Signature mismatch."), None),
        (ValueError("not a transport error"), None),
    ],
)  # fmt: skip
def test_transport_failures_are_described_in_words(error: BaseException, described: str | None) -> None:
    failure = transport_failure(error)
    assert (failure.describe() if failure else None) == described
