"""Retry decisions of StreamRetryPolicy, and that the SDK's request loop follows them."""

from __future__ import annotations

import pytest
from tablestore.error import OTSServiceError

from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.errors import ServerBusyError, ThrottledError
from cdcbridge.tablestore.proto import stream_pb2
from cdcbridge.tablestore.retry import RETRIED_FOR_EVERY_API, THROTTLED_CODES, StreamRetryPolicy
from tests.unit.tablestore.fake_tablestore import FakeTablestore, error_reply, ok


def _error(code: str, status: int = 503, message: str = "") -> OTSServiceError:
    return OTSServiceError(status, code, message, "request-id")


@pytest.fixture
def policy() -> StreamRetryPolicy:
    return StreamRetryPolicy(max_retry_times=5, max_retry_delay=3.0, jitter=lambda: 1.0)


@pytest.mark.parametrize("api", ["ListStream", "DescribeStream", "GetShardIterator", "GetStreamRecord"])
@pytest.mark.parametrize(
    "error",
    [_error("OTSTimeout"), _error("OTSInternalServerError", 500), _error("OTSServerUnavailable"), _error("X", 502)],
)
def test_stream_reads_are_retried_on_timeouts_and_server_errors(
    policy: StreamRetryPolicy, api: str, error: OTSServiceError
) -> None:
    assert policy.should_retry(0, error, api)


@pytest.mark.parametrize("api", ["PutRow", "UpdateRow", "DeleteRow", "BatchWriteRow", "UpdateTable"])
def test_writes_are_not_retried_on_timeouts(policy: StreamRetryPolicy, api: str) -> None:
    assert not policy.should_retry(0, _error("OTSTimeout"), api)
    assert not policy.should_retry(0, _error("OTSInternalServerError", 500), api)


@pytest.mark.parametrize("api", ["GetStreamRecord", "PutRow", "UpdateRow"])
@pytest.mark.parametrize("code", sorted(RETRIED_FOR_EVERY_API))
def test_busy_and_throttled_answers_are_retried_for_every_api(policy: StreamRetryPolicy, api: str, code: str) -> None:
    assert policy.should_retry(0, _error(code, 429 if code == "OTSFlowControl" else 503), api)


@pytest.mark.parametrize(
    "code",
    ["OTSConditionCheckFail", "OTSAuthFailed", "OTSTrimmedDataAccess", "OTSParameterInvalid", "OTSObjectNotExist"],
)
@pytest.mark.parametrize("api", ["GetStreamRecord", "UpdateRow", "PutRow"])
def test_definitive_answers_are_never_retried_even_with_a_5xx_status(
    policy: StreamRetryPolicy, code: str, api: str
) -> None:
    assert not policy.should_retry(0, _error(code, 503), api)


def test_a_table_count_quota_is_never_retried(policy: StreamRetryPolicy) -> None:
    assert not policy.should_retry(0, _error("OTSQuotaExhausted", 403, "Number of tables exceeds the quota:64."), "X")
    assert policy.should_retry(0, _error("OTSQuotaExhausted", 403, "Too frequent table operations."), "CreateTable")


@pytest.mark.parametrize("code", sorted(THROTTLED_CODES))
def test_every_throttling_code_backs_off_like_throttling(code: str) -> None:
    policy = StreamRetryPolicy(max_retry_delay=10.0, jitter=lambda: 1.0)
    assert policy.get_retry_delay(1, _error(code, 403), "PutRow") == pytest.approx(1.0)  # 0.5 s · 2¹


def test_retries_stop_at_the_limit(policy: StreamRetryPolicy) -> None:
    busy = _error("OTSServerBusy")
    assert policy.should_retry(4, busy, "GetStreamRecord")
    assert not policy.should_retry(5, busy, "GetStreamRecord")


def test_sdk_repeatable_reads_keep_being_retried(policy: StreamRetryPolicy) -> None:
    assert policy.should_retry(0, _error("OTSTimeout"), "GetRange")


def test_delays_grow_exponentially_and_are_capped() -> None:
    policy = StreamRetryPolicy(max_retry_delay=1.0, jitter=lambda: 0.0)
    unstable = _error("OTSTimeout")
    delays = [policy.get_retry_delay(n, unstable, "GetStreamRecord") for n in range(5)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])  # half the limit, limit = 0.2·2ⁿ capped at 1


def test_throttling_backs_off_longer_than_instability() -> None:
    policy = StreamRetryPolicy(max_retry_delay=10.0, jitter=lambda: 1.0)
    assert policy.get_retry_delay(0, _error("OTSFlowControl", 429), "GetStreamRecord") == pytest.approx(0.5)
    assert policy.get_retry_delay(0, _error("OTSTimeout"), "GetStreamRecord") == pytest.approx(0.2)


def _records_page(iterator: str) -> tuple[int, bytes]:
    return ok(stream_pb2.GetStreamRecordResponse(next_shard_iterator=iterator))


def test_the_sdk_retries_a_stream_read_through_the_policy(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script(
        "GetStreamRecord",
        error_reply(503, "OTSTimeout", "slow"),
        error_reply(500, "OTSInternalServerError"),
        _records_page("next"),
    )
    page = stream_client.get_stream_record("it")
    assert page.next_shard_iterator == "next"
    assert len(fake.seen("GetStreamRecord")) == 3
    bodies = {request.body for request in fake.seen("GetStreamRecord")}
    assert len(bodies) == 1, "a retry resends the same request"


def test_exhausted_retries_surface_as_a_typed_error(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("GetStreamRecord", error_reply(503, "OTSServerBusy", "busy"))
    with pytest.raises(ServerBusyError) as caught:
        stream_client.get_stream_record("it")
    assert caught.value.retryable
    assert len(fake.seen("GetStreamRecord")) == 4  # first try + max_retry_times=3


def test_throttling_is_typed_after_retries(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("DescribeStream", error_reply(429, "OTSFlowControl", "slow down"))
    with pytest.raises(ThrottledError, match="Back off"):
        stream_client.describe_stream("s1")
