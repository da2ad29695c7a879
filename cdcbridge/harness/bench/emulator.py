"""Emulator throughput: BatchWriteRow rows/s through the official SDK, GetStreamRecord records/s read back.

The reads go through the SDK's request path (signing, response verification) but decode only the protobuf, not
the PlainBuffer records, so the figure is the server's and the wire's, not a client's row decoding.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from typing import Any

import click
from tablestore import (
    BatchWriteRowRequest,
    CapacityUnit,
    OTSClient,
    PutRowItem,
    ReservedThroughput,
    Row,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
)

from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.tablestore.proto import stream_pb2

_STREAM_APIS = ("ListStream", "DescribeStream", "GetShardIterator", "GetStreamRecord")
_REQUESTS = {
    "ListStream": stream_pb2.ListStreamRequest,
    "DescribeStream": stream_pb2.DescribeStreamRequest,
    "GetShardIterator": stream_pb2.GetShardIteratorRequest,
    "GetStreamRecord": stream_pb2.GetStreamRecordRequest,
}
_RESPONSES = {
    "ListStream": stream_pb2.ListStreamResponse,
    "DescribeStream": stream_pb2.DescribeStreamResponse,
    "GetShardIterator": stream_pb2.GetShardIteratorResponse,
    "GetStreamRecord": stream_pb2.GetStreamRecordResponse,
}


def _raw_stream_client(client: OTSClient) -> OTSClient:
    """Teach this SDK client the stream APIs with protobuf-only encoders/decoders (research §2 hooks)."""
    protocol = client.protocol
    protocol.api_list = [*protocol.api_list, *_STREAM_APIS]
    for name in _STREAM_APIS:
        protocol.encoder.api_encode_map[name] = lambda request_type=_REQUESTS[name], **fields: request_type(**fields)

        def decode(body: bytes, request_id: str, response_type: Any = _RESPONSES[name]) -> tuple[Any, Any]:
            message = response_type()
            message.ParseFromString(body)
            return message, message

        protocol.decoder.api_decode_map[name] = decode
    return client


def _enable_stream_on_create(client: OTSClient) -> None:
    original = client.protocol.encoder.api_encode_map["CreateTable"]

    def encode(*args: Any, **kwargs: Any) -> Any:
        proto = original(*args, **kwargs)
        proto.stream_spec.enable_stream = True
        proto.stream_spec.expiration_time = 24
        return proto

    client.protocol.encoder.api_encode_map["CreateTable"] = encode


def _serve_in_child(port_queue: Any, stop_event: Any) -> None:
    server = EmulatorServer().start()
    port_queue.put(server.port)
    stop_event.wait()
    server.stop()


class _ChildEmulator:
    """The emulator in its own process, so the SDK client and the server do not share one GIL."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(target=_serve_in_child, args=(queue, self._stop), daemon=True)
        self._process.start()
        self.url = f"http://127.0.0.1:{queue.get(timeout=60)}"

    def stats(self) -> dict[str, Any]:
        return EmulatorAdmin(self.url, timeout=10).stats()

    def stop(self) -> None:
        self._stop.set()
        self._process.join(timeout=30)


class _ThreadEmulator:
    def __init__(self) -> None:
        self._server = EmulatorServer().start()
        self.url = self._server.url

    def stats(self) -> dict[str, Any]:
        return self._server.stats.snapshot()

    def stop(self) -> None:
        self._server.stop()


def run_emulator_bench(
    rows: int = 50_000,
    *,
    batch_size: int = 200,
    read_limit: int = 1000,
    value_bytes: int = 64,
    table: str = "bench",
    separate_process: bool = False,
) -> dict[str, Any]:
    """Start an emulator (in this process, or in a child with `separate_process`), write `rows` rows with the
    SDK's batch_write_row, read every stream record back with raw GetStreamRecord calls.

    Returns rows/s and records/s end to end (client included) and inside the server alone.
    """
    logging.getLogger("tablestore-client").setLevel(logging.ERROR)
    server = _ChildEmulator() if separate_process else _ThreadEmulator()
    try:
        client = OTSClient(server.url, "emulator-id", "emulator-secret", "bench", logger_name="tablestore-client")
        _enable_stream_on_create(client)
        _raw_stream_client(client)
        client.create_table(
            TableMeta(table, [("pk", "STRING"), ("n", "INTEGER")]),
            TableOptions(),
            ReservedThroughput(CapacityUnit(0, 0)),
        )
        payload = "v" * value_bytes
        started = time.perf_counter()
        for first in range(0, rows, batch_size):
            items = [
                PutRowItem(Row([("pk", f"key-{i:09d}"), ("n", i)], [("value", payload), ("i", i)]), None)
                for i in range(first, min(rows, first + batch_size))
            ]
            request = BatchWriteRowRequest()
            request.add(TableInBatchWriteRowItem(table, items))
            response = client.batch_write_row(request)
            if not response.is_all_succeed():
                raise RuntimeError(f"bench batch starting at row {first} failed on the emulator")
        write_seconds = time.perf_counter() - started

        stream_id = client._request_helper("ListStream", table_name=table).streams[0].stream_id
        shards = client._request_helper("DescribeStream", stream_id=stream_id).shards
        started = time.perf_counter()
        records = 0
        calls = 0
        for shard in shards:
            iterator = client._request_helper(
                "GetShardIterator", stream_id=stream_id, shard_id=shard.shard_id
            ).shard_iterator
            while iterator:
                response = client._request_helper("GetStreamRecord", shard_iterator=iterator, limit=read_limit)
                calls += 1
                records += len(response.stream_records)
                if not response.stream_records:
                    break
                iterator = response.next_shard_iterator
        read_seconds = time.perf_counter() - started
        server_stats = server.stats()
    finally:
        server.stop()
    return {
        "server": "child process" if separate_process else "thread of this process",
        "rows": rows,
        "batch_size": batch_size,
        "write_seconds": round(write_seconds, 3),
        "rows_per_s": round(rows / write_seconds),
        "records": records,
        "read_calls": calls,
        "read_limit": read_limit,
        "read_seconds": round(read_seconds, 3),
        "records_per_s": round(records / read_seconds) if read_seconds else None,
        # Time inside the emulator only (no HTTP, no client): what the server alone could sustain.
        "server_rows_per_s": _per_second(rows, server_stats.get("BatchWriteRow")),
        "server_records_per_s": _per_second(records, server_stats.get("GetStreamRecord")),
    }


def _per_second(count: int, stats: dict[str, float] | None) -> int | None:
    if not stats or not stats["seconds"]:
        return None
    return round(count / stats["seconds"])


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--rows", type=click.IntRange(min=1), default=50_000, show_default=True)
@click.option(
    "--separate-process/--same-process", default=True, show_default=True,
    help="Serve from a child process (its own GIL) or a thread of this one (as `cdcbridge bench emulator` does).",
)  # fmt: skip
def main(rows: int, separate_process: bool) -> None:
    """Manual run without recording results: print the figures as JSON."""
    click.echo(json.dumps(run_emulator_bench(rows, separate_process=separate_process), indent=2))


if __name__ == "__main__":  # pragma: no cover - manual run
    main(prog_name="python -m cdcbridge.harness.bench.emulator")
