"""The stream each configured source table is read from, and, with `source.wait_for_tables`, waiting until the
table and its stream exist (a stack that creates its tables after the workers start, as `docker compose up` may)
instead of exiting: the wait is logged once a minute with the command that ends it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from cdcbridge.config import TableConfig
from cdcbridge.observability.wait_log import WaitLog
from cdcbridge.publish.errors import BridgeStartError
from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.errors import TableNotFoundError

log = logging.getLogger(__name__)

#: How often a waiting worker looks again: creating a table takes a person or a set-up job, so seconds are enough.
TABLE_POLL_SECONDS = 5.0


def create_table_command(table: str) -> str:
    """The command that creates `table` for the bridge (the primary key is the user's to choose)."""
    return f"cdcbridge table create {table} --pk NAME:TYPE,... --stream"


def _stream_or_problem(streams: StreamClient, table: TableConfig, instance: str) -> tuple[str | None, str]:
    """The table's stream id, or None and what is missing, with the command that fixes it."""
    try:
        details = streams.describe_table_stream(table.name)
    except TableNotFoundError:
        return None, (
            f"table {table.name} does not exist in Tablestore instance {instance}; create it "
            f"(`{create_table_command(table.name)}`, with your primary key) or remove it from source.tables"
        )
    if not details.enabled or not details.stream_id:
        return None, (
            f"table {table.name} has no stream enabled; enable it (`cdcbridge table enable-stream {table.name}`)"
        )
    return details.stream_id, ""


def table_stream_id(
    streams: StreamClient,
    table: TableConfig,
    instance: str,
    *,
    wait: bool,
    stop: threading.Event,
    clock: Callable[[], float] = time.monotonic,
    poll_seconds: float = TABLE_POLL_SECONDS,
) -> str:
    """The id of the stream to read `table` from. A missing table or stream raises BridgeStartError, or with
    `wait` is looked for again every `poll_seconds` until it appears (or `stop` is set), logged once a minute and
    whenever what is missing changes (the table was created, its stream is still off)."""
    wait_log = WaitLog(log, clock=clock)
    while True:
        stream_id, problem = _stream_or_problem(streams, table, instance)
        if stream_id is not None:
            if wait_log.waited:
                log.info("table %s is ready (stream %s); starting", table.name, stream_id)
            return stream_id
        if not wait:
            raise BridgeStartError(
                f"{problem} and start the bridge again (or set source.wait_for_tables: true to have workers wait)"
            )
        wait_log.waiting(problem, f"waiting for table {table.name}: %s (source.wait_for_tables is on)")
        if stop.wait(poll_seconds):
            raise BridgeStartError(f"stopped while waiting for table {table.name}")
