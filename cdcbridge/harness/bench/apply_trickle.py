"""End-to-end freshness at a trickle, measured from outside: a row written through the Tablestore SDK every
`interval` seconds, the whole local stack running (emulator, Kafka, the registry), two bridge workers
(`cdcbridge run`) and the apply job (`cdcbridge apply`, the product's defaults unless a trigger is given) as
processes of their own. Two phases on the same stack: new rows (PutRow of a new key), then an update of each of
those rows, now stored in the target (UpdateRow of one column, in random order), which the apply job folds
against the stored row. Per write: the time from just before it until a reader sees its value in the Delta table,
polled with delta-rs (``deltalake``, a dev dependency: a reader outside the job's JVM that costs the job no Spark
work) every `poll` seconds. Reported as p50/p95/max beside the Kafka leg (SDK write → the row's first message in
Kafka after it), which shows what the apply job adds."""

from __future__ import annotations

import itertools
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cdcbridge.harness.demo import demo_config, write_config
from cdcbridge.harness.processes import BridgeWorkerProcess, ChildProcess
from cdcbridge.harness.stack.stack import LocalStack, StackEndpoints, StackPorts

TABLE = "trickle"
PRIMARY_KEY = [("id", "INTEGER")]
#: The update phase's values of ``n`` start here, above any the insert phase writes.
UPDATE_N_FROM = 1_000_000


def _config(work: Path, endpoints: StackEndpoints, trigger_seconds: float | None) -> Path:
    """The demo's settings with the apply job's defaults (and the trigger, if one is given)."""
    apply = {} if trigger_seconds is None else {"trigger_seconds": trigger_seconds}
    return write_config(work, demo_config(work, endpoints, table=TABLE, topic_prefix="trickle", apply=apply))


class DeltaPoller:
    """Notes when each (id, n) first becomes readable in a Delta table (delta-rs, a new table version only)."""

    def __init__(self, path: Path, poll: float) -> None:
        self.path = path
        self.poll = poll
        self.seen: dict[tuple[int, int], float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="delta-poller", daemon=True)
        self._table: Any = None
        self._version = -1

    def _run(self) -> None:
        while not self.stop.wait(self.poll):
            self.check()

    def check(self) -> None:
        from deltalake import DeltaTable, QueryBuilder

        if self._table is None:
            if not DeltaTable.is_deltatable(str(self.path)):
                return
            self._table = DeltaTable(str(self.path))
        else:
            self._table.update_incremental()
        version = self._table.version()
        if version == self._version:
            return
        self._version = version
        now = time.time()
        rows = QueryBuilder().register("t", self._table).execute("SELECT id, n FROM t").read_all()
        for row_id, n in zip(rows.column("id").to_pylist(), rows.column("n").to_pylist(), strict=True):
            if n is not None:
                self.seen.setdefault((int(row_id), int(n)), now)


def _kafka_times(endpoints: StackEndpoints, topic: str, ids: set[int], deadline: float) -> dict[int, list[float]]:
    """Per id, the Kafka timestamps (s) of its messages on `topic`, read until every id has one and the topic has
    been quiet for 5 s, or the deadline (the bridge sets the producer timestamp when it sends)."""
    from confluent_kafka import Consumer

    from cdcbridge.formats.keys import decode_key

    consumer = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": f"trickle-{time.time()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    found: dict[int, list[float]] = {}
    idle_since = time.time()
    try:
        consumer.subscribe([topic])
        while time.time() < deadline and (not ids <= found.keys() or time.time() - idle_since < 5):
            message = consumer.poll(1.0)
            if message is None or message.error() or message.key() is None:
                continue
            idle_since = time.time()
            key = decode_key(message.key())
            if key and isinstance(key[-1], int) and key[-1] in ids:
                found.setdefault(key[-1], []).append(message.timestamp()[1] / 1000)
    finally:
        consumer.close()
    return found


def first_seen_after(written: dict[tuple[int, int], float], sent: dict[int, list[float]]) -> list[float]:
    """Per write ((id, n) → time before it), the delay to the first of its id's messages sent at or after it."""
    delays = []
    for (row_id, _), at in written.items():
        later = [ts for ts in sent.get(row_id, ()) if ts >= at]
        if later:
            delays.append(min(later) - at)
    return delays


def trickle(write_row: Callable[[int, int], None], ids: Iterable[int], n_from: int, *, seconds: float,
            interval: float) -> dict[tuple[int, int], float]:  # fmt: skip
    """Write one row every `interval` s for `seconds` s (or until `ids` runs out): the next id with ``n`` =
    `n_from` + the write's index; returns (id, n) → the time just before each write."""
    written: dict[tuple[int, int], float] = {}
    started = time.time()
    for index, row_id in enumerate(ids):
        if time.time() - started >= seconds:
            break
        n = n_from + index
        written[(row_id, n)] = time.time()
        write_row(row_id, n)
        time.sleep(max(0.0, started + (index + 1) * interval - time.time()))
    return written


def _wait_visible(poller: DeltaPoller, written: dict[tuple[int, int], float], timeout: float) -> None:
    wait_until = time.time() + timeout
    while not set(written) <= set(poller.seen) and time.time() < wait_until:
        time.sleep(0.5)


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_s": None, "p95_s": None, "max_s": None}
    ordered = sorted(values)
    return {
        "p50_s": round(statistics.median(ordered), 2),
        "p95_s": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 2),
        "max_s": round(ordered[-1], 2),
    }


def measure_trickle(*, seconds: float = 60.0, interval: float = 0.5, poll: float = 0.1,
                    trigger_seconds: float | None = None, warmup_timeout: float = 240.0,
                    seed: int = 7) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Run the whole stack, write a new row every `interval` s for `seconds` s, then update each of them once at
    the same pace; the freshness figures of each phase (``inserts``, ``updates``: ``p50_s``, ``p95_s``, ``max_s``;
    ``kafka_p50_s`` … for the bridge's leg; ``visible`` of ``rows``)."""
    from tablestore import (
        CapacityUnit,
        Condition,
        ReservedThroughput,
        Row,
        RowExistenceExpectation,
        TableMeta,
        TableOptions,
    )

    from cdcbridge.tablestore import StreamClient, build_ots_client

    work = Path(tempfile.mkdtemp(prefix="cdcbridge-trickle-"))
    stack = LocalStack(work / "stack")
    endpoints = stack.up(StackPorts(0, 0, 0, 0))
    workers: list[BridgeWorkerProcess] = []
    job: ChildProcess | None = None
    poller = DeltaPoller(work / "delta" / TABLE, poll)
    try:
        assert endpoints.emulator_url is not None
        ots = build_ots_client(endpoints.emulator_url, "cdcbridge", "emulator-id", "emulator-secret")
        StreamClient(ots).create_table_with_stream(
            TableMeta(TABLE, PRIMARY_KEY), TableOptions(time_to_live=-1, max_version=1),
            ReservedThroughput(CapacityUnit(0, 0)), 24,
        )  # fmt: skip
        config_path = _config(work, endpoints, trigger_seconds)
        workers = [BridgeWorkerProcess(config_path, f"trickle-{i}", work / f"worker-{i}.log") for i in (1, 2)]
        for worker in workers:
            worker.start()
        job = ChildProcess("apply", [sys.executable, "-m", "cdcbridge", "apply", "--config", str(config_path)],
                           work / "apply.log").start()  # fmt: skip
        ignore = Condition(RowExistenceExpectation.IGNORE)

        def insert(row_id: int, n: int) -> None:
            ots.put_row(TABLE, Row([("id", row_id)], [("name", f"row {row_id}"), ("n", n)]), ignore)

        def update(row_id: int, n: int) -> None:
            ots.update_row(TABLE, Row([("id", row_id)], {"put": [("n", n)]}), ignore)

        insert(0, 0)  # warm-up: the job has started and written once
        deadline = time.time() + warmup_timeout
        while (0, 0) not in poller.seen and time.time() < deadline:
            if not job.alive:
                raise RuntimeError(f"the apply job exited: {job.log_tail()}")
            time.sleep(0.5)
            poller.check()
        if (0, 0) not in poller.seen:
            raise RuntimeError(f"the warm-up row did not reach Delta within {warmup_timeout:.0f} s")
        poller.thread.start()
        inserted = trickle(insert, itertools.count(1), 1, seconds=seconds, interval=interval)
        _wait_visible(poller, inserted, 60)
        stored = [row_id for row_id, _ in inserted]
        random.Random(seed).shuffle(stored)
        updated = trickle(update, stored, UPDATE_N_FROM, seconds=seconds, interval=interval)
        _wait_visible(poller, updated, 60)
        poller.stop.set()
        poller.thread.join(10)
        sent = _kafka_times(endpoints, f"trickle.{TABLE}.mutation", set(stored), time.time() + 60)
        return {
            "inserts": _phase_figures(inserted, poller.seen, sent, interval, trigger_seconds),
            "updates": _phase_figures(updated, poller.seen, sent, interval, trigger_seconds),
        }
    finally:
        poller.stop.set()
        if job is not None:
            job.stop()
        for worker in workers:
            worker.stop()
        stack.down()
        shutil.rmtree(work, ignore_errors=True)


def _phase_figures(
    written: dict[tuple[int, int], float],
    seen: dict[tuple[int, int], float],
    sent: dict[int, list[float]],
    interval: float,
    trigger_seconds: float | None,
) -> dict[str, Any]:
    """One phase's freshness into Delta and its Kafka leg."""
    delta = [seen[write] - at for write, at in written.items() if write in seen]
    figures: dict[str, Any] = {"rows": len(written), "visible": len(delta), "interval_s": interval,
                               "trigger_seconds": trigger_seconds, **_quantiles(delta)}  # fmt: skip
    figures.update({f"kafka_{name}": value for name, value in _quantiles(first_seen_after(written, sent)).items()})
    return figures
