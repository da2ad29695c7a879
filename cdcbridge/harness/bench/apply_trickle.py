"""End-to-end freshness at a trickle, measured from outside: a row written through the Tablestore SDK every
`interval` seconds, the whole local stack running (emulator, Kafka, the registry), two bridge workers
(`cdcbridge run`) and the apply job (`cdcbridge apply`, the product's defaults unless a trigger is given) as
processes of their own. Per row: the time from just before its SDK write until a reader sees it in the Delta table,
polled with delta-rs (``deltalake``, a dev dependency: a reader outside the job's JVM that costs the job no Spark
work) every `poll` seconds. Reported as p50/p95/max beside the Kafka leg (SDK write → the row's first message in
Kafka), which shows what the apply job adds."""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cdcbridge.harness.demo import demo_config, write_config
from cdcbridge.harness.processes import BridgeWorkerProcess, ChildProcess
from cdcbridge.harness.stack.stack import LocalStack, StackEndpoints, StackPorts

TABLE = "trickle"
PRIMARY_KEY = [("id", "INTEGER")]


def _config(work: Path, endpoints: StackEndpoints, trigger_seconds: float | None) -> Path:
    """The demo's settings with the apply job's defaults (and the trigger, if one is given)."""
    apply = {} if trigger_seconds is None else {"trigger_seconds": trigger_seconds}
    return write_config(work, demo_config(work, endpoints, table=TABLE, topic_prefix="trickle", apply=apply))


class DeltaPoller:
    """Notes when each id first becomes readable in a Delta table (delta-rs, a new table version only)."""

    def __init__(self, path: Path, poll: float) -> None:
        self.path = path
        self.poll = poll
        self.seen: dict[int, float] = {}
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
        ids = QueryBuilder().register("t", self._table).execute("SELECT id FROM t").read_all().column("id")
        for value in ids.to_pylist():
            self.seen.setdefault(int(value), now)


def _kafka_times(endpoints: StackEndpoints, topic: str, ids: set[int], deadline: float) -> dict[int, float]:
    """Per id, the Kafka timestamp (s) of its first message on `topic` (the broker's append time is not
    needed: the bridge sets the producer timestamp when it sends)."""
    from confluent_kafka import Consumer

    from cdcbridge.formats.keys import decode_key

    consumer = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": f"trickle-{time.time()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    found: dict[int, float] = {}
    try:
        consumer.subscribe([topic])
        while len(found) < len(ids) and time.time() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error() or message.key() is None:
                continue
            key = decode_key(message.key())
            if key and isinstance(key[-1], int) and key[-1] in ids:
                found.setdefault(key[-1], message.timestamp()[1] / 1000)
    finally:
        consumer.close()
    return found


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
                    trigger_seconds: float | None = None, warmup_timeout: float = 240.0) -> dict[str, Any]:  # fmt: skip
    """Run the whole stack, write a row every `interval` s for `seconds` s and return the freshness figures
    (``p50_s``, ``p95_s``, ``max_s``; ``kafka_p50_s`` … for the bridge's leg; ``visible`` of ``rows``)."""
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

        def write(row_id: int) -> float:
            at = time.time()
            row = Row([("id", row_id)], [("name", f"row {row_id}"), ("n", row_id)])
            ots.put_row(TABLE, row, Condition(RowExistenceExpectation.IGNORE))
            return at

        write(0)  # warm-up: the job has started and written once
        deadline = time.time() + warmup_timeout
        while 0 not in poller.seen and time.time() < deadline:
            if not job.alive:
                raise RuntimeError(f"the apply job exited: {job.log_tail()}")
            time.sleep(0.5)
            poller.check()
        if 0 not in poller.seen:
            raise RuntimeError(f"the warm-up row did not reach Delta within {warmup_timeout:.0f} s")
        poller.thread.start()
        written: dict[int, float] = {}
        started = time.time()
        row_id = 1
        while time.time() - started < seconds:
            written[row_id] = write(row_id)
            row_id += 1
            time.sleep(max(0.0, started + (row_id - 1) * interval - time.time()))
        wait_until = time.time() + 60
        while not set(written) <= set(poller.seen) and time.time() < wait_until:
            time.sleep(0.5)
        poller.stop.set()
        poller.thread.join(10)
        delta = [poller.seen[i] - at for i, at in written.items() if i in poller.seen]
        kafka_at = _kafka_times(endpoints, f"trickle.{TABLE}.mutation", set(written), time.time() + 30)
        kafka = [kafka_at[i] - at for i, at in written.items() if i in kafka_at]
        figures: dict[str, Any] = {"rows": len(written), "visible": len(delta), "interval_s": interval,
                                   "trigger_seconds": trigger_seconds, **_quantiles(delta)}  # fmt: skip
        figures.update({f"kafka_{name}": value for name, value in _quantiles(kafka).items()})
        return figures
    finally:
        poller.stop.set()
        if job is not None:
            job.stop()
        for worker in workers:
            worker.stop()
        stack.down()
