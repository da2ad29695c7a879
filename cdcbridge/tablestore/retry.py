"""Retry policy of our Tablestore clients: every throttling, quota and busy answer is retried with back-off; an
answer that leaves a write's outcome unknown is retried for reads only; condition failures never.

The service's error-code page sorts its codes in two kinds we act on differently:
- "not executed, try later" (throttling, quotas, busy partitions, row conflicts, tables not ready): retried for every
  API, writes included, since nothing was applied. The SDKs retry only part of them (the Python and Java SDKs leave
  OTSFlowControl, OTSCapacityUnitExhausted and most OTSQuotaExhausted answers to the caller).
- "it may or may not have happened" (OTSTimeout, OTSServerUnavailable, OTSInternalServerError, other 5xx): retried
  for reads, stream reads included (the SDK's repeatable list has no stream API; the Go SDK retries them too). A
  write keeps the SDK's caution: it may have been applied, and repeating an increment would apply it twice.
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

#: Throttling and quota answers: the service refused the request before doing anything; back off longer.
THROTTLED_CODES = frozenset(
    {
        "OTSFlowControl",
        "OTSServerBusy",
        "OTSQuotaExhausted",
        "OTSCapacityUnitExhausted",
        "OTSNotEnoughCapacityUnit",
        "OTSTooFrequentReservedThroughputAdjustment",
        "OTSOperationThrottled",
    }
)

#: Retried for every API: the request was not executed and will succeed later.
RETRIED_FOR_EVERY_API = THROTTLED_CODES | {
    "OTSPartitionUnavailable",
    "OTSRowOperationConflict",
    "OTSOperationConflict",
    "OTSTableNotReady",
}

#: Retried for reads only: the outcome of a write is unknown.
RETRIED_FOR_READS = frozenset({"OTSTimeout", "OTSServerUnavailable", "OTSInternalServerError", "OTSRequestTimeout"})

#: OTSQuotaExhausted with this message is the table count, which waiting does not change (not retryable).
_PERMANENT_QUOTA_MESSAGE = "Number of tables"


class StreamRetryPolicy(DefaultRetryPolicy):
    """DefaultRetryPolicy plus: every throttling / busy code is retried, stream reads are repeatable, some codes never
    are.

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
        if exception.code in NEVER_RETRIED_CODES or _is_permanent_quota(exception):
            return False
        if self._max_retry_time_reached(retry_times, exception, api_name):
            return False
        if exception.code in RETRIED_FOR_EVERY_API:
            return True
        if exception.code in RETRIED_FOR_READS and self.is_repeatable_api(api_name):
            return True
        return self._can_retry(retry_times, exception, api_name)

    def get_retry_delay(self, retry_times: int, exception: OTSServiceError, api_name: str) -> float:
        throttled = exception.code in THROTTLED_CODES or RetryUtil.is_server_throttling_exception(exception)
        factor = self.server_throttling_exception_delay_factor if throttled else self.stability_exception_delay_factor
        limit = min(factor * self.scale_factor**retry_times, self.max_retry_delay)
        return limit * 0.5 + limit * 0.5 * self._jitter()


def _is_permanent_quota(exception: OTSServiceError) -> bool:
    return exception.code == "OTSQuotaExhausted" and (exception.message or "").startswith(_PERMANENT_QUOTA_MESSAGE)
