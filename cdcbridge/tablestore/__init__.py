"""The Tablestore Stream client on top of the official `tablestore` SDK (which has no stream calls).

Public surface: :class:`StreamClient`, :func:`build_ots_client`, the result types in :mod:`.models` and the error
family in :mod:`.errors`. Exports resolve lazily, so importing a leaf package (``.plainbuffer``, ``.proto``), as the
emulator does, does not load the SDK client.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdcbridge.tablestore.client import StreamClient
    from cdcbridge.tablestore.connection import build_ots_client
    from cdcbridge.tablestore.errors import (
        AuthError,
        ConnectionFailedError,
        CorruptRecordError,
        ServerBusyError,
        ShardNotFoundError,
        StreamError,
        StreamNotFoundError,
        TableNotFoundError,
        ThrottledError,
        TrimmedDataError,
    )
    from cdcbridge.tablestore.models import (
        ShardInfo,
        StreamDescription,
        StreamInfo,
        StreamRecordsPage,
        StreamStatus,
        TableStreamDetails,
    )
    from cdcbridge.tablestore.retry import StreamRetryPolicy
    from cdcbridge.tablestore.sdk_extension import install_stream_apis

_EXPORTS = {
    "StreamClient": "client",
    "build_ots_client": "connection",
    "install_stream_apis": "sdk_extension",
    "StreamRetryPolicy": "retry",
    "ShardInfo": "models",
    "StreamDescription": "models",
    "StreamInfo": "models",
    "StreamRecordsPage": "models",
    "StreamStatus": "models",
    "TableStreamDetails": "models",
    "AuthError": "errors",
    "ConnectionFailedError": "errors",
    "CorruptRecordError": "errors",
    "ServerBusyError": "errors",
    "ShardNotFoundError": "errors",
    "StreamError": "errors",
    "StreamNotFoundError": "errors",
    "TableNotFoundError": "errors",
    "ThrottledError": "errors",
    "TrimmedDataError": "errors",
}

__all__ = [
    "AuthError",
    "ConnectionFailedError",
    "CorruptRecordError",
    "ServerBusyError",
    "ShardInfo",
    "ShardNotFoundError",
    "StreamClient",
    "StreamDescription",
    "StreamError",
    "StreamInfo",
    "StreamNotFoundError",
    "StreamRecordsPage",
    "StreamRetryPolicy",
    "StreamStatus",
    "TableNotFoundError",
    "TableStreamDetails",
    "ThrottledError",
    "TrimmedDataError",
    "build_ots_client",
    "install_stream_apis",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
