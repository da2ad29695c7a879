"""Build an official OTSClient that can read streams: stream APIs installed, stream-aware retry policy."""

from __future__ import annotations

from typing import Any

from tablestore import OTSClient
from tablestore.error import OTSClientError
from tablestore.retry import RetryPolicy

from cdcbridge.tablestore.errors import ClientConfigError
from cdcbridge.tablestore.retry import StreamRetryPolicy
from cdcbridge.tablestore.sdk_extension import install_stream_apis

#: Seconds a socket may stay silent; well above a GetStreamRecord round trip, well below a lease period.
DEFAULT_SOCKET_TIMEOUT = 30.0
#: Connections per client; a worker reads a handful of shards at once, the SDK's default of 500 is wasteful.
DEFAULT_MAX_CONNECTIONS = 50


def build_ots_client(
    endpoint: str,
    instance_name: str,
    access_key_id: str,
    access_key_secret: str,
    *,
    region: str | None = None,
    sts_token: str | None = None,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    retry_policy: RetryPolicy | None = None,
    logger_name: str | None = None,
) -> OTSClient:
    """An OTSClient for `endpoint` (``http://`` or ``https://``) with the stream APIs installed.

    `region` switches the SDK to V4 signing (required by newer instances); without it requests are signed V2.
    The secret is handed to the SDK only and never appears in our errors.
    """
    for name, value in (("endpoint", endpoint), ("instance name", instance_name), ("access key id", access_key_id)):
        if not value:
            raise ClientConfigError(f"Tablestore {name} is empty; set it in the source section of the configuration")
    if not access_key_secret:
        raise ClientConfigError("Tablestore access key secret is empty; set it (e.g. via an ${ENV} reference)")
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "max_connection": max_connections,
        "retry_policy": retry_policy if retry_policy is not None else StreamRetryPolicy(),
    }
    if sts_token:
        options["sts_token"] = sts_token
    if logger_name:
        options["logger_name"] = logger_name
    try:
        client = OTSClient(endpoint, access_key_id, access_key_secret, instance_name, region=region or None, **options)
    except OTSClientError as error:
        raise ClientConfigError(
            f"cannot build a Tablestore client for endpoint {endpoint!r}, instance {instance_name!r}: "
            f"{error.get_error_message()}"
        ) from None
    return install_stream_apis(client)
