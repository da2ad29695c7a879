"""Retry policy for clients that read streams: stream reads are repeatable, condition failures never retried.

The SDK's DefaultRetryPolicy retries timeouts and 5xx only for the APIs it lists as repeatable, and the stream APIs
are not among them (the SDK has none). Reading a stream changes nothing on the server, so, like the Go SDK, we retry
those reads on timeouts and server errors too. Writes keep the SDK's cautious rules: a timed-out write may have been
applied, so retrying it blindly could apply it twice.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tablestore.error import OTSServiceError
from tablestore.retry import DefaultRetryPolicy, RetryUtil

#: Stream APIs that only read; repeating them is harmless.
STREAM_READ_APIS = frozenset({"ListStream", "DescribeStream", "GetShardIterator", "GetStreamRecord"})

#: Codes that say "this request as sent can never succeed" (or "it lost a race"): retrying only hides the answer.
NEVER_RETRIED_CODES = frozenset(
    {
        "OTSConditionCheckFail",
        "OTSAuthFailed",
        "OTSTrimmedDataAccess",
        "OTSParameterInvalid",
        "OTSObjectNotExist",
        "OTSObjectAlreadyExist",
        "OTSInvalidPK",
    }
)

#: Throttling the SDK does not list (flow control answers HTTP 429); safe to retry for every API.
EXTRA_THROTTLING_CODES = frozenset({"OTSFlowControl", "OTSCapacityUnitExhausted"})


class StreamRetryPolicy(DefaultRetryPolicy):
    """DefaultRetryPolicy plus: stream reads are repeatable, flow control is retried, some codes never are.

    `max_retry_times` bounds the retries of one call, `max_retry_delay` (seconds) caps one back-off; `jitter` returns
    a float in [0, 1) and is injectable so tests get exact delays.
    """

    def __init__(
        self,
        *,
        max_retry_times: int = 10,
        max_retry_delay: float = 3.0,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.max_retry_times = max_retry_times
        self.max_retry_delay = max_retry_delay
        self._jitter = jitter

    def is_repeatable_api(self, api_name: str) -> bool:
        return api_name in STREAM_READ_APIS or RetryUtil.is_repeatable_api(api_name)

    def should_retry(self, retry_times: int, exception: OTSServiceError, api_name: str) -> bool:
        if exception.code in NEVER_RETRIED_CODES:
            return False
        if self._max_retry_time_reached(retry_times, exception, api_name):
            return False
        if exception.code in EXTRA_THROTTLING_CODES:
            return True
        return self._can_retry(retry_times, exception, api_name)

    def get_retry_delay(self, retry_times: int, exception: OTSServiceError, api_name: str) -> float:
        throttled = exception.code in EXTRA_THROTTLING_CODES or RetryUtil.is_server_throttling_exception(exception)
        factor = self.server_throttling_exception_delay_factor if throttled else self.stability_exception_delay_factor
        limit = min(factor * self.scale_factor**retry_times, self.max_retry_delay)
        return limit * 0.5 + limit * 0.5 * self._jitter()
