"""Teach an official `tablestore` OTSClient the stream APIs, without forking the SDK.

The SDK routes every call through ``OTSProtocol``: ``api_list`` admits an API name, ``encoder.api_encode_map`` builds
its request message and ``decoder.api_decode_map`` parses its response. Registering the four stream APIs there lets us
call them through ``client._request_helper``, so SDK signing, response verification and retries apply unchanged.
The table APIs learn the stream fields the SDK drops: CreateTable/UpdateTable accept a ``stream_spec`` keyword, and
the DescribeTable/UpdateTable results gain a ``stream_details`` attribute.

These are SDK internals, which is why ``tablestore`` is pinned exactly (:data:`SUPPORTED_SDK_VERSION`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import tablestore
import tablestore.protobuf.table_store_pb2 as sdk_pb2
from google.protobuf.message import Message

from cdcbridge.tablestore.errors import SdkCompatibilityError
from cdcbridge.tablestore.proto import recast, stream_pb2

SUPPORTED_SDK_VERSION = "6.4.8"

#: API name → (request message type, response message type).
STREAM_APIS: dict[str, tuple[type[Message], type[Message]]] = {
    "ListStream": (stream_pb2.ListStreamRequest, stream_pb2.ListStreamResponse),
    "DescribeStream": (stream_pb2.DescribeStreamRequest, stream_pb2.DescribeStreamResponse),
    "GetShardIterator": (stream_pb2.GetShardIteratorRequest, stream_pb2.GetShardIteratorResponse),
    "GetStreamRecord": (stream_pb2.GetStreamRecordRequest, stream_pb2.GetStreamRecordResponse),
}

_INSTALLED_MARK = "_cdcbridge_stream_apis"


def install_stream_apis(ots_client: Any) -> Any:
    """Register the stream APIs and the table stream fields on `ots_client` (idempotent); returns the client.

    After this, ``ots_client._request_helper("GetStreamRecord", request)`` sends a ``stream_pb2`` request and returns
    the parsed ``stream_pb2`` response.
    """
    protocol = _protocol_of(ots_client)
    if getattr(protocol, _INSTALLED_MARK, False):
        return ots_client
    _warn_if_untested_sdk()
    encode_map, decode_map = protocol.encoder.api_encode_map, protocol.decoder.api_decode_map
    missing = [name for name in ("CreateTable", "UpdateTable", "DescribeTable") if name not in encode_map]
    missing += [name for name in ("UpdateTable", "DescribeTable") if name not in decode_map]
    if missing:
        raise SdkCompatibilityError(
            f"tablestore {tablestore.__version__} has no codec for {sorted(set(missing))}; "
            f"install tablestore=={SUPPORTED_SDK_VERSION}"
        )

    protocol.api_list = [*protocol.api_list, *(name for name in STREAM_APIS if name not in protocol.api_list)]
    for name, (request_type, response_type) in STREAM_APIS.items():
        encode_map[name] = _request_passthrough(name, request_type)
        decode_map[name] = _response_parser(response_type)
    encode_map["CreateTable"] = _with_stream_spec(encode_map["CreateTable"])
    encode_map["UpdateTable"] = _with_stream_spec(encode_map["UpdateTable"])
    decode_map["DescribeTable"] = _exposing_stream_details(decode_map["DescribeTable"])
    decode_map["UpdateTable"] = _exposing_stream_details(decode_map["UpdateTable"])
    setattr(protocol, _INSTALLED_MARK, True)
    return ots_client


def _protocol_of(ots_client: Any) -> Any:
    protocol = getattr(ots_client, "protocol", None)
    hooks = ("api_list", "encoder", "decoder")
    if (
        protocol is None
        or not all(hasattr(protocol, hook) for hook in hooks)
        or not hasattr(ots_client, "_request_helper")
    ):
        raise SdkCompatibilityError(
            f"{type(ots_client).__name__} is not a tablestore OTSClient with the protocol hooks the stream extension "
            f"needs; install tablestore=={SUPPORTED_SDK_VERSION}"
        )
    return protocol


def _warn_if_untested_sdk() -> None:
    if tablestore.__version__ != SUPPORTED_SDK_VERSION:
        warnings.warn(
            f"cdcbridge's stream extension was built against tablestore {SUPPORTED_SDK_VERSION}, found "
            f"{tablestore.__version__}; stream calls may break",
            RuntimeWarning,
            stacklevel=3,
        )


def _request_passthrough(api: str, request_type: type[Message]) -> Callable[[Message], Message]:
    def encode(request: Message) -> Message:
        if not isinstance(request, request_type):
            raise TypeError(f"{api} takes a {request_type.__name__}, got {type(request).__name__}")
        return request

    return encode


def _response_parser(response_type: type[Message]) -> Callable[[bytes, str], tuple[Message, Message]]:
    def decode(body: bytes, request_id: str) -> tuple[Message, Message]:
        response = response_type()
        response.ParseFromString(body)
        return response, response

    return decode


def _with_stream_spec(encode: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a CreateTable/UpdateTable encoder so a ``stream_spec=`` keyword lands in the request (field kept by
    number, so ``columns_to_get``, unknown to the SDK's schema, reaches the wire)."""

    def encode_with_stream(*args: Any, stream_spec: stream_pb2.StreamSpecification | None = None, **kwargs: Any):
        request = encode(*args, **kwargs)
        if stream_spec is not None:
            request.stream_spec.CopyFrom(recast(stream_spec, sdk_pb2.StreamSpecification))
        return request

    return encode_with_stream


def _exposing_stream_details(decode: Callable[[bytes, str], tuple[Any, Any]]) -> Callable[[bytes, str], Any]:
    """Wrap a DescribeTable/UpdateTable decoder so the result carries ``stream_details`` (ours, or None if absent)."""

    def decode_with_stream(body: bytes, request_id: str) -> tuple[Any, Any]:
        result, proto = decode(body, request_id)
        details = recast(proto.stream_details, stream_pb2.StreamDetails) if proto.HasField("stream_details") else None
        result.stream_details = details
        return result, proto

    return decode_with_stream
