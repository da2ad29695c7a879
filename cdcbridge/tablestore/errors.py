"""Typed errors of the Tablestore Stream client, mapped from the SDK's OTSServiceError / OTSClientError.

Callers (the shard consumers) decide by type: a trimmed position means "restart from the oldest record", an unknown
shard means "re-sync the shard list", throttling means "back off". Messages name the stream, shard or table and say
what to do; they never contain credentials (the SDK errors we wrap carry none either).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tablestore.error import OTSClientError, OTSServiceError
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    MaxRetryError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
)


class StreamError(Exception):
    """Base of every error raised by :mod:`cdcbridge.tablestore`.

    `retryable` tells whether trying the same call again later can succeed without changing anything.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        http_status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status
        self.request_id = request_id

    def __str__(self) -> str:
        details = [f"{name}={value}" for name, value in self._details() if value]
        return f"{self.message} ({', '.join(details)})" if details else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def _details(self) -> list[tuple[str, object]]:
        return [("code", self.code), ("http_status", self.http_status), ("request_id", self.request_id)]


class TrimmedDataError(StreamError):
    """The position read is older than the stream keeps (OTSTrimmedDataAccess): its records are gone."""


class StreamNotFoundError(StreamError):
    """The stream id is unknown: the stream was disabled, re-enabled (a new id) or never existed."""


class ShardNotFoundError(StreamError):
    """The shard id is unknown to the stream (e.g. a shard list read before the stream was re-enabled)."""


class TableNotFoundError(StreamError):
    """The table does not exist in the instance."""


class AuthError(StreamError):
    """The service rejected the credentials or the signature (OTSAuthFailed)."""


class ThrottledError(StreamError):
    """The service throttled the request (flow control, capacity, quota); back off and retry."""

    retryable = True


class ServerBusyError(StreamError):
    """The service is busy, unavailable or timed out; retry later."""

    retryable = True


class InvalidRequestError(StreamError):
    """The service refused the request as malformed (OTSParameterInvalid), e.g. an iterator it cannot parse."""


class StreamServiceError(StreamError):
    """Any other error code from the service."""


class ConnectionFailedError(StreamError):
    """No valid response arrived: network failure, or a response the SDK refused (bad signature, MD5, clock skew)."""

    retryable = True


class CorruptRecordError(StreamError):
    """A stream record could not be decoded (bad PlainBuffer or checksum)."""


class ClientConfigError(StreamError):
    """The client settings are unusable (endpoint, instance name, empty credentials)."""


class SdkCompatibilityError(StreamError):
    """The installed tablestore SDK lacks the internals the stream extension hooks into."""


THROTTLING_CODES = frozenset(
    {
        "OTSFlowControl",
        "OTSNotEnoughCapacityUnit",
        "OTSCapacityUnitExhausted",
        "OTSQuotaExhausted",
        "OTSOperationThrottled",
        "OTSTooFrequentReservedThroughputAdjustment",
    }
)
BUSY_CODES = frozenset(
    {
        "OTSServerBusy",
        "OTSPartitionUnavailable",
        "OTSTimeout",
        "OTSServerUnavailable",
        "OTSInternalServerError",
        "OTSTableNotReady",
        "OTSRequestTimeout",
        "OTSRowOperationConflict",
    }
)
_NOT_FOUND_WORDS = re.compile(r"not\s+exist|does\s+not|not\s+found|unknown|no\s+such", re.IGNORECASE)


def map_sdk_error(
    error: BaseException,
    *,
    api: str,
    table: str | None = None,
    stream_id: str | None = None,
    shard_id: str | None = None,
) -> StreamError:
    """Translate an SDK or transport error raised while calling `api` into our typed family.

    The names given (table, stream, shard) only serve the message; what they refer to is inferred from the error code,
    the API and the service's message, since the code the service uses for an unknown stream or shard is not documented.
    """
    if isinstance(error, StreamError):
        return error
    subject = _describe_subject(table=table, stream_id=stream_id, shard_id=shard_id)
    if isinstance(error, OTSServiceError):
        return _map_service_error(error, api=api, subject=subject, table=table, stream_id=stream_id, shard_id=shard_id)
    if isinstance(error, OTSClientError):
        return ConnectionFailedError(
            f"{api} on {subject} got no valid response: {error.get_error_message()}. Check the endpoint and the "
            "machine clock (responses more than 15 minutes off are refused), then retry",
            http_status=error.get_http_status(),
        )
    failure = transport_failure(error)
    if failure is not None:
        fix = "the endpoint and that Tablestore runs there" if failure.connecting else "the network to Tablestore"
        return ConnectionFailedError(f"{failure.describe()} during {api} on {subject}; check {fix}, then retry")
    return ConnectionFailedError(
        f"{api} on {subject} failed to reach Tablestore: {type(error).__name__}: {error}. Check the endpoint and the "
        "network, then retry"
    )


@dataclass(frozen=True)
class TransportFailure:
    """A request to Tablestore that got no answer: where it went (when known) and why, in words a user reads."""

    endpoint: str | None
    reason: str
    #: True when no connection was made at all (refused, unknown host, connect timeout): the endpoint is the suspect.
    connecting: bool

    def describe(self) -> str:
        where = f"Tablestore at {self.endpoint}" if self.endpoint else "Tablestore"
        verb = "cannot reach" if self.connecting else "lost the connection to"
        return f"{verb} {where} ({self.reason})"


def transport_failure(error: BaseException) -> TransportFailure | None:
    """The transport failure in `error` or in the errors that caused it (urllib3, which the SDK sends through, wraps
    the socket error in MaxRetryError; our own wrappers chain it), or None when a response did arrive."""
    endpoint: str | None = None
    for link in _chain(error):
        if isinstance(link, MaxRetryError | ReadTimeoutError) and link.pool is not None and endpoint is None:
            endpoint = _pool_url(link.pool)
        if isinstance(link, NewConnectionError):
            if endpoint is None:
                endpoint = _pool_url(link.conn)
            return TransportFailure(endpoint, _connect_reason(link), connecting=True)
        if isinstance(link, ConnectTimeoutError):
            return TransportFailure(endpoint, "connection timed out", connecting=True)
        if isinstance(link, ReadTimeoutError):
            return TransportFailure(endpoint, "no answer within the socket timeout", connecting=False)
        if isinstance(link, ProtocolError):
            return TransportFailure(endpoint, "the connection closed in the middle of a request", connecting=False)
        if isinstance(link, ConnectionRefusedError):
            return TransportFailure(endpoint, "connection refused", connecting=True)
        if isinstance(link, OSError) and not isinstance(link, HTTPError):
            return TransportFailure(endpoint, link.strerror or str(link) or type(link).__name__, connecting=False)
    return None


def _chain(error: BaseException) -> list[BaseException]:
    """`error`, then what it wraps: a MaxRetryError's reason, then each __cause__ / __context__ (no cycles)."""
    found: list[BaseException] = []
    pending: list[object] = [error]
    while pending:
        link = pending.pop(0)
        if not isinstance(link, BaseException) or any(link is seen for seen in found):
            continue
        found.append(link)
        pending += [link.reason if isinstance(link, MaxRetryError) else None, link.__cause__, link.__context__]
    return found


def _pool_url(pool: Any) -> str | None:
    host, port = getattr(pool, "host", None), getattr(pool, "port", None)
    if not host:
        return None
    scheme = getattr(pool, "scheme", None) or ("https" if type(pool).__name__.startswith("HTTPS") else "http")
    return f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"


def _connect_reason(error: NewConnectionError) -> str:
    if isinstance(error, NameResolutionError):
        return "host name not found"
    cause = next((c for c in _chain(error)[1:] if isinstance(c, OSError) and c.strerror), None)
    if cause is not None:
        return cause.strerror.lower()
    text = str(error).rsplit("Failed to establish a new connection: ", 1)[-1]
    return re.sub(r"^\[Errno -?\d+\] ", "", text).lower()


def _map_service_error(
    error: OTSServiceError,
    *,
    api: str,
    subject: str,
    table: str | None,
    stream_id: str | None,
    shard_id: str | None,
) -> StreamError:
    code, status, request_id = error.get_error_code(), error.get_http_status(), error.get_request_id()
    said = error.get_error_message() or ""
    meta: dict[str, Any] = {"code": code, "http_status": status, "request_id": request_id}
    if code == "OTSTrimmedDataAccess":
        return TrimmedDataError(
            f"{api} on {subject}: the requested position is older than the stream retains ({said}). Restart the "
            "shard from its oldest record (get_shard_iterator without a timestamp); records in between are lost",
            **meta,
        )
    if code == "OTSAuthFailed":
        return AuthError(
            f"{api} on {subject}: Tablestore rejected the credentials ({said}). Check the access key id and secret, "
            "the instance name and, with V4 signing, the region",
            **meta,
        )
    if code in THROTTLING_CODES or status == 429:
        return ThrottledError(f"{api} on {subject} was throttled ({said}). Back off and retry", **meta)
    if code in BUSY_CODES or (status is not None and status >= 500):
        return ServerBusyError(f"{api} on {subject}: the service is busy or unavailable ({said}). Retry later", **meta)
    not_found = code == "OTSObjectNotExist" or (code == "OTSParameterInvalid" and _NOT_FOUND_WORDS.search(said))
    if not_found:
        missing = _not_found_error(said, meta, api=api, table=table, stream_id=stream_id, shard_id=shard_id)
        if missing is not None:
            return missing
    if code == "OTSParameterInvalid" and api == "GetStreamRecord":
        return InvalidRequestError(
            f"{api} on {subject}: the service cannot use the shard iterator ({said}). If it is a stored checkpoint "
            "(a lease row's Checkpoint), set that Checkpoint to TRIM_HORIZON: the shard is read again from its "
            "oldest retained record (records already sent are sent again, none is lost)",
            **meta,
        )
    if code in ("OTSParameterInvalid", "OTSObjectNotExist"):
        return InvalidRequestError(
            f"{api} on {subject}: the service refused the request as invalid ({said}). If this is a stored shard "
            "iterator, it is not usable any more: restart the shard from a fresh iterator",
            **meta,
        )
    return StreamServiceError(f"{api} on {subject} failed: {code}: {said}", **meta)


def _not_found_error(
    said: str,
    meta: dict[str, Any],
    *,
    api: str,
    table: str | None,
    stream_id: str | None,
    shard_id: str | None,
) -> StreamError | None:
    lowered = said.lower()
    if "iterator" in lowered:
        return None
    if "shard" in lowered or (shard_id and api == "GetShardIterator" and "stream" not in lowered):
        return ShardNotFoundError(
            f"{api}: shard {shard_id or '?'} of stream {stream_id or '?'} does not exist ({said}). Re-read the shard "
            "list with describe_stream; the stream may have been re-enabled under a new id",
            **meta,
        )
    if "stream" in lowered or (stream_id and "table" not in lowered):
        return StreamNotFoundError(
            f"{api}: stream {stream_id or '?'} does not exist ({said}). Look up the table's current stream with "
            "list_stream or describe_table_stream; disabling and re-enabling a stream gives it a new id",
            **meta,
        )
    if meta["code"] == "OTSObjectNotExist":
        return TableNotFoundError(
            f"{api}: table {table or '?'} does not exist ({said}). Check the table name and the instance",
            **meta,
        )
    return None


def _describe_subject(*, table: str | None, stream_id: str | None, shard_id: str | None) -> str:
    parts = [f"table {table}" if table else "", f"stream {stream_id}" if stream_id else ""]
    parts.append(f"shard {shard_id}" if shard_id else "")
    text = ", ".join(part for part in parts if part)
    return text or "the instance"
