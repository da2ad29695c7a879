"""The emulator's one exception family: each error carries the real Tablestore error code and HTTP status.

The model raises these; the protocol layer turns them into the protobuf `Error` body the SDK parses, so a client
sees exactly the code (and retry behaviour) it would get from the real service.
"""

from __future__ import annotations

from typing import ClassVar

#: HTTP status per Tablestore error code (Alibaba Cloud's error-code page; research/tablestore_stream.md §1.4).
#: OTSNotEnoughCapacityUnit and OTSOperationThrottled are codes the SDKs retry but the page does not list: 403 is our
#: choice, like the other capacity codes.
HTTP_STATUS_BY_CODE: dict[str, int] = {
    "OTSParameterInvalid": 400,
    "OTSInvalidPK": 400,
    "OTSOutOfRowSizeLimit": 400,
    "OTSOutOfColumnCountLimit": 400,
    "OTSUnsupportOperation": 400,
    "OTSTrimmedDataAccess": 400,
    "OTSAuthFailed": 403,
    "OTSConditionCheckFail": 403,
    "OTSQuotaExhausted": 403,
    "OTSCapacityUnitExhausted": 403,
    "OTSNotEnoughCapacityUnit": 403,
    "OTSTooFrequentReservedThroughputAdjustment": 403,
    "OTSOperationThrottled": 403,
    "OTSObjectNotExist": 404,
    "OTSTableNotReady": 404,
    "OTSMethodNotAllowed": 405,
    "OTSRequestTimeout": 408,
    "OTSRowOperationConflict": 409,
    "OTSObjectAlreadyExist": 409,
    "OTSRequestBodyTooLarge": 413,
    "OTSFlowControl": 429,
    "OTSInternalServerError": 500,
    "OTSServerBusy": 503,
    "OTSPartitionUnavailable": 503,
    "OTSTimeout": 503,
    "OTSServerUnavailable": 503,
}


#: The service's message for codes that fault rules inject (used when a rule gives none); the SDKs match some of
#: them (OTSQuotaExhausted is retried only for "Too frequent table operations.").
DOCUMENTED_MESSAGES: dict[str, str] = {
    "OTSFlowControl": "The requests have been throttled.",
    "OTSServerBusy": "Server is busy.",
    "OTSPartitionUnavailable": "The partition is not available.",
    "OTSTimeout": "Operation timeout.",
    "OTSServerUnavailable": "Server is not available.",
    "OTSInternalServerError": "Internal server error.",
    "OTSRowOperationConflict": "Data is being modified by the other request.",
    "OTSTableNotReady": "The table is not ready.",
    "OTSQuotaExhausted": "Too frequent table operations.",
    "OTSCapacityUnitExhausted": "Capacity unit is not enough.",
    "OTSNotEnoughCapacityUnit": "Remaining capacity unit is not enough.",
    "OTSTooFrequentReservedThroughputAdjustment": "Capacity unit adjustment is too frequent.",
    "OTSOperationThrottled": "The operation has been throttled.",
    "OTSRequestTimeout": "Request timeout.",
    "OTSRequestBodyTooLarge": "The size of POST data is too large.",
}


class EmulatorError(Exception):
    """A request the emulated service refuses. `code` is the Tablestore error code, `http_status` its status."""

    code: ClassVar[str] = "OTSInternalServerError"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code  # type: ignore[misc]

    @property
    def http_status(self) -> int:
        return HTTP_STATUS_BY_CODE.get(self.code, 500)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ParameterInvalid(EmulatorError):
    code = "OTSParameterInvalid"


class InvalidPK(EmulatorError):
    code = "OTSInvalidPK"


class OutOfRowSizeLimit(EmulatorError):
    code = "OTSOutOfRowSizeLimit"


class OutOfColumnCountLimit(EmulatorError):
    code = "OTSOutOfColumnCountLimit"


class ObjectNotExist(EmulatorError):
    code = "OTSObjectNotExist"


class ObjectAlreadyExist(EmulatorError):
    code = "OTSObjectAlreadyExist"


class ConditionCheckFail(EmulatorError):
    code = "OTSConditionCheckFail"

    def __init__(self, message: str = "Condition check failed.") -> None:
        super().__init__(message)


class TrimmedDataAccess(EmulatorError):
    code = "OTSTrimmedDataAccess"

    def __init__(self, message: str = "Requested stream data is already trimmed or does not exist.") -> None:
        super().__init__(message)


class AuthFailed(EmulatorError):
    code = "OTSAuthFailed"


class MethodNotAllowed(EmulatorError):
    code = "OTSMethodNotAllowed"


class UnsupportOperation(EmulatorError):
    code = "OTSUnsupportOperation"


def error_for_code(code: str, message: str | None = None) -> EmulatorError:
    """An error with any Tablestore code (fault injection uses codes the model never raises itself); without a
    message, the service's own message for that code."""
    return EmulatorError(message or DOCUMENTED_MESSAGES.get(code, f"Injected {code}."), code=code)
