"""Shared fixtures: a model instance with an explicit clock, and an in-thread emulator with an SDK client."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import tablestore.protobuf.table_store_pb2 as pb2
from tablestore import OTSClient

from cdcbridge.emulator.keys import PkType, PrimaryKeyColumn
from cdcbridge.emulator.model import Instance, StreamSpec
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.tablestore.proto import stream_pb2

#: A fixed "now" for model tests (2023-11-14T22:13:20Z), in µs.
T0_US = 1_700_000_000_000_000
T0_MS = T0_US // 1000


class Clock:
    """Time that moves only when a test moves it."""

    def __init__(self, start_us: int = T0_US) -> None:
        self.now_us = start_us

    def tick(self, us: int = 1000) -> int:
        self.now_us += us
        return self.now_us

    def __call__(self) -> int:
        return self.now_us


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def instance() -> Instance:
    return Instance()


def make_table(
    instance: Instance,
    name: str = "t",
    *,
    now_us: int = T0_US,
    stream_hours: int | None = 24,
    pk: tuple[PrimaryKeyColumn, ...] = (PrimaryKeyColumn("id", PkType.INTEGER),),
    **kwargs: object,
) -> None:
    stream = StreamSpec(True, stream_hours) if stream_hours else None
    instance.create_table(name, list(pk), now_us=now_us, stream=stream, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def server() -> Iterator[EmulatorServer]:
    logging.getLogger("tablestore-test-client").setLevel(logging.CRITICAL)
    emulator = EmulatorServer().start()
    yield emulator
    emulator.stop()


def sdk_client(server: EmulatorServer, secret: str = "emulator-secret", **kwargs: object) -> OTSClient:
    return OTSClient(server.url, "emulator-id", secret, "any-instance", logger_name="tablestore-test-client", **kwargs)


@pytest.fixture(scope="module")
def client(server: EmulatorServer) -> OTSClient:
    return sdk_client(server)


# -- raw protobuf calls through the SDK's request path (signing, response checks), for stream APIs -------------

STREAM_RESPONSES = {
    "ListStream": stream_pb2.ListStreamResponse,
    "DescribeStream": stream_pb2.DescribeStreamResponse,
    "GetShardIterator": stream_pb2.GetShardIteratorResponse,
    "GetStreamRecord": stream_pb2.GetStreamRecordResponse,
}
TABLE_RESPONSES = {
    "CreateTable": pb2.CreateTableResponse,
    "UpdateTable": pb2.UpdateTableResponse,
    "DescribeTable": pb2.DescribeTableResponse,
}


def raw_client(server: EmulatorServer, **kwargs: object) -> OTSClient:
    """An SDK client whose `_request_helper(api, message)` sends a protobuf message and returns the parsed answer."""
    client = sdk_client(server, **kwargs)
    protocol = client.protocol
    protocol.api_list = [*protocol.api_list, *STREAM_RESPONSES]
    for name, response_type in {**STREAM_RESPONSES, **TABLE_RESPONSES}.items():
        protocol.encoder.api_encode_map[name] = lambda message: message

        def decode(body: bytes, request_id: str, response_type: type = response_type) -> tuple[object, None]:
            message = response_type()
            message.ParseFromString(body)
            return message, None

        protocol.decoder.api_decode_map[name] = decode
    return client
