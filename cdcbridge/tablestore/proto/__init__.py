"""Protobuf messages of the Tablestore Stream APIs, including the fields the SDK's older schema lacks.

Import as ``from cdcbridge.tablestore.proto import stream_pb2``. The SDK's own ``table_store_pb2`` carries
``stream_spec`` / ``stream_details`` on the table messages; :func:`recast` moves them to and from our fuller
messages without losing fields (protobuf keeps fields it does not know as unknown fields).
"""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import Message

from cdcbridge.tablestore.proto import stream_pb2

__all__ = ["recast", "stream_pb2"]

M = TypeVar("M", bound=Message)


def recast(message: Message, target_type: type[M]) -> M:
    """Re-read `message` as `target_type`, a message with the same wire layout (e.g. the SDK's StreamDetails as
    ours, so ``column_to_get`` becomes visible; or ours as the SDK's before assigning it to a table request)."""
    target = target_type()
    target.ParseFromString(message.SerializePartialToString())
    return target
