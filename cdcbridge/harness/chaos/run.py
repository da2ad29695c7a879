"""`cdcbridge chaos`: a bounded soak run of the whole flow while a seeded fault schedule fires, then the checks.

Local stack → source table with a stream → N bridge workers (`cdcbridge run`) → Kafka (RECORD_IMAGE and
MUTATE_LOG topics) → the apply job (Delta, from the MUTATE_LOG topic), with a load generator writing throughout.
Each fault cycle injects one fault, waits until it is over, then until every shard's checkpoint has passed a record
written after it (recovery), and records how long that took. At the end the load stops, the bridge drains, and the
checks run on what was read back: on both topics every stream record (kept before trims, read at the end) is in
Kafka at least once and per-key order never regresses; the last image of every key equals the source row; and after
the apply job catches up the target equals the source, counters included. The report (JSON and text) holds the
figures.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cdcbridge.config import load_config
from cdcbridge.harness.chaos.apply_runner import BackgroundApply
from cdcbridge.harness.chaos.checks import (
    SourceChange,
    check_delivery,
    check_image_delivery,
    check_image_order,
    check_image_state,
    check_key_order,
    counter_mismatches,
)
from cdcbridge.harness.chaos.environment import (
    ACCESS_KEY_ID,
    ACCESS_KEY_SECRET,
    INSTANCE,
    TABLE,
    ChaosEnvironment,
    create_source_table,
    write_chaos_config,
)
from cdcbridge.harness.chaos.errors import ChaosError
from cdcbridge.harness.chaos.injectors import INJECTORS, FaultTimings
from cdcbridge.harness.chaos.ledger import StreamLedger
from cdcbridge.harness.chaos.load import COUNTER_COLUMNS, PK_NAMES, LoadGenerator
from cdcbridge.harness.chaos.progress import lagging_shards, undelivered_shards
from cdcbridge.harness.chaos.report import ChaosReport, FaultCycle, machine_info
from cdcbridge.harness.chaos.schedule import ALL_KINDS, FaultKind, plan_faults
from cdcbridge.harness.chaos.tcp_proxy import TcpProxy
from cdcbridge.harness.chaos.topic_log import read_image_topic, read_mutation_topic
from cdcbridge.harness.chaos.workers import DATA_LOSS_LINE, PRODUCER_REPLACED_LINE, WorkerPool
from cdcbridge.harness.demo import apply_until_equal, read_delta_rows, read_source_rows
from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.harness.stack.stack import LocalStack, StackPorts
from cdcbridge.tablestore import StreamClient, build_ots_client

log = logging.getLogger(__name__)

Echo = Callable[[str], None]
SDK_LOGGER = "cdcbridge.harness.chaos.sdk"
#: Shards the stream has before the first fault (the root is split), so every worker has work from the start.
INITIAL_SHARDS = 2


@dataclass(frozen=True)
class ChaosOptions:
    """Everything a run is parameterised by (see `run_chaos`)."""

    cycles: int
    duration_s: float | None
    workers: int
    seed: int
    rate: float = 40.0
    rows: int = 200
    kinds: tuple[FaultKind, ...] = ALL_KINDS
    timings: FaultTimings = field(default_factory=FaultTimings)
    pause_s: tuple[float, float] = (1.0, 3.0)
    recovery_timeout_s: float = 180.0
    catch_up_timeout_s: float = 600.0
    keep: bool = False
    interruptible: bool = False


def run_chaos(
    cycles: int,
    duration_s: float | None,
    workers: int,
    seed: int,
    report_path: Path,
    *,
    rate: float = 40.0,
    rows: int = 200,
    kinds: tuple[FaultKind, ...] = ALL_KINDS,
    timings: FaultTimings | None = None,
    pause_s: tuple[float, float] = (1.0, 3.0),
    recovery_timeout_s: float = 180.0,
    catch_up_timeout_s: float = 600.0,
    work_dir: Path | None = None,
    keep: bool = False,
    spark: Any = None,
    echo: Echo | None = None,
    interruptible: bool = False,
) -> ChaosReport:
    """Run up to `cycles` fault cycles (stopping early once `duration_s` has passed, if given) with `workers`
    bridge workers, then check and report; the report is written to `report_path` (JSON) and beside it (.txt).

    `seed` fixes the fault plan, every injector's choices, the emulator's fault draws and the load. `spark` is an
    existing session (tests); by default one is built and stopped. With `keep` the services and the work folder
    (logs of every worker, the stack, the Delta table) stay. With `interruptible` (the command line), a first
    SIGINT/SIGTERM stops injecting faults and goes on to the checks; a second one aborts (the report is written).
    A problem of the harness itself ends up in `report.harness_errors` (the run then fails), not in an exception.
    """
    if workers < 1:
        raise ValueError("run at least one bridge worker")
    options = ChaosOptions(
        cycles, duration_s, workers, seed, rate, rows, kinds, timings or FaultTimings(), pause_s, recovery_timeout_s,
        catch_up_timeout_s, keep, interruptible,
    )  # fmt: skip
    work = work_dir or Path(tempfile.mkdtemp(prefix="cdcbridge-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    report = ChaosReport(seed=seed, workers=workers, cycles_planned=cycles, duration_limit_s=duration_s,
                         load_rate=rate, rows=rows, machine=machine_info(),
                         started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))  # fmt: skip
    began = time.monotonic()
    say = echo or (lambda line: log.info("%s", line))
    try:
        with ExitStack() as cleanup:
            _run(options, report, work, spark, say, cleanup, began)
    except Exception as error:
        log.exception("the chaos run failed")
        report.harness_errors.append(f"{type(error).__name__}: {error}")
    finally:
        report.run_seconds = round(time.monotonic() - began, 1)
        report.write_json(report_path)
        report_path.with_suffix(".txt").write_text("\n".join(report.lines()) + "\n")
    return report


def _run(options: ChaosOptions, report: ChaosReport, work: Path, spark: Any, say: Echo, cleanup: ExitStack,
         began: float) -> None:  # fmt: skip
    """Set up (registering each piece's teardown on `cleanup` as it starts), cycle, drain, check."""
    stack = LocalStack(work / "stack")
    say(f"starting Kafka, Apicurio Registry and the Tablestore emulator (work folder {work})")
    endpoints = stack.up(StackPorts(0, 0, 0, 0), increments_as_deltas=True)
    if not options.keep:
        cleanup.callback(stack.down)
    registry = urlsplit(endpoints.registry_url)
    assert registry.hostname and registry.port and endpoints.emulator_url
    proxy = TcpProxy(registry.hostname, registry.port, open_=True)
    cleanup.callback(proxy.stop)

    # The harness's own clients see the injected errors too; their SDK error logs would only be noise.
    logging.getLogger(SDK_LOGGER).setLevel(logging.CRITICAL)
    emulator_url = endpoints.emulator_url

    def client() -> Any:
        return build_ots_client(emulator_url, INSTANCE, ACCESS_KEY_ID, ACCESS_KEY_SECRET, logger_name=SDK_LOGGER)

    ots = client()
    streams = StreamClient(ots)
    admin = EmulatorAdmin(emulator_url)
    stream_id = create_source_table(streams, admin, INITIAL_SHARDS)
    proxied_registry = endpoints.registry_url.replace(f":{registry.port}/", f":{proxy.port}/", 1)
    config_path = write_chaos_config(work, endpoints, proxied_registry)
    config = load_config(config_path)
    (work / "workers").mkdir(exist_ok=True)
    pool = WorkerPool(config_path, work / "workers", options.workers)
    cleanup.callback(_record_workers, report, pool)  # runs after the workers stopped (callbacks run last-in first)
    cleanup.callback(pool.stop_all)
    env = ChaosEnvironment(
        work_dir=work, stack=stack, endpoints=endpoints, registry_proxy=proxy, ots=ots, streams=streams,
        stream_id=stream_id, config_path=config_path, config=config, pool=pool,
        ledger=StreamLedger(streams, stream_id, TABLE, admin),
    )  # fmt: skip

    say(
        f"starting {options.workers} bridge workers and the load ({options.rate:.0f} writes/s over {options.rows} rows)"
    )
    pool.start_all()
    load = LoadGenerator(client(), TABLE, rows=options.rows, rate=options.rate, seed=options.seed).start()
    cleanup.callback(load.stop)
    if spark is None:
        from cdcbridge.harness.stack.spark import local_spark_session

        spark = local_spark_session("cdcbridge-chaos", config.apply.spark)
        cleanup.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")  # broker restarts would flood the output with client warnings
    interrupt = threading.Event()
    cleanup.callback(lambda: setattr(report, "interrupted", interrupt.is_set()))
    if options.interruptible:  # after Spark: its context installs its own SIGINT handler
        cleanup.callback(_stop_on_signals(interrupt, say))
    background = BackgroundApply(config, spark).start()
    cleanup.callback(_stop_background, report, background)
    warm = _wait_recovered(env, time.time(), options.recovery_timeout_s)
    if warm is None:
        raise ChaosError(f"the bridge never caught up with the load before the first fault; see {work}")
    say(f"steady after {warm:.1f}s; injecting faults (seed {options.seed})")

    _run_cycles(env, report, options, began, say, interrupt)

    say("stopping the load; waiting for the bridge to deliver the rest")
    report.load = load.stop().as_dict()
    if load.error is not None:
        report.harness_errors.append(f"the load generator failed: {load.error!r}")
    report.drained = _wait_drained(env, options.recovery_timeout_s)
    _stop_background(report, background)
    pool.stop_all()
    _check(env, report, spark, options.catch_up_timeout_s, say)


def _record_workers(report: ChaosReport, pool: WorkerPool) -> None:
    report.worker_starts = pool.starts
    report.unexpected_worker_exits = [vars(e) for e in pool.unexpected_exits]
    loss_lines, replaced_lines = pool.log_lines(DATA_LOSS_LINE, PRODUCER_REPLACED_LINE)
    report.data_loss_log_lines, report.data_loss_log_examples = len(loss_lines), loss_lines[:5]
    report.producer_replacements = len(replaced_lines)


def _run_cycles(env: ChaosEnvironment, report: ChaosReport, options: ChaosOptions, began: float, say: Echo,
                interrupt: threading.Event) -> None:  # fmt: skip
    plan = plan_faults(options.cycles, options.seed, options.kinds)
    for index, kind in enumerate(plan, start=1):
        if options.duration_s is not None and time.monotonic() - began >= options.duration_s:
            say(f"duration of {options.duration_s:.0f}s reached after {index - 1} cycles")
            return
        if interrupt.is_set():
            say(f"interrupted after {index - 1} cycles")
            return
        rng = random.Random(f"{options.seed}:{index}:{kind.value}")
        time.sleep(rng.uniform(*options.pause_s))
        started = time.monotonic()
        cycle = FaultCycle(index, kind.value, "", round(started - began, 1), 0.0, False)
        try:
            injection = INJECTORS[kind](env, rng, options.timings)
            cycle.detail, healed_at = injection.detail, injection.healed_at
        except Exception as error:
            log.exception("injecting %s failed", kind.value)
            cycle.error = f"{type(error).__name__}: {error}"
            cycle.detail, healed_at = f"injection failed: {cycle.error}", time.time()
            report.harness_errors.append(f"cycle {index} ({kind.value}): {cycle.error}")
        cycle.fault_seconds = round(time.monotonic() - started, 2)
        recovered = _wait_recovered(env, healed_at, options.recovery_timeout_s)
        cycle.recovered = recovered is not None
        cycle.recovery_seconds = None if recovered is None else round(recovered, 2)
        report.cycles.append(cycle)
        outcome = f"recovered in {recovered:.1f}s" if recovered is not None else "NOT RECOVERED"
        say(f"cycle {index:>3}/{len(plan)} {kind.value:<20} {cycle.detail}; {outcome}")


def _stop_on_signals(interrupt: threading.Event, say: Echo) -> Callable[[], None]:
    """SIGINT/SIGTERM: the first stops the fault cycles (the checks still run), the second aborts the run.
    Returns the function that puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def on_signal(signum: int, frame: Any) -> None:
        if interrupt.is_set():
            restore()
            raise KeyboardInterrupt
        interrupt.set()
        say(f"signal {signum}: no more faults after this cycle; then the checks (signal again to abort)")

    for sig in previous:
        signal.signal(sig, on_signal)
    return restore


def _wait_recovered(env: ChaosEnvironment, since: float, timeout: float) -> float | None:
    """Seconds from `since` until every shard's checkpoint passed a record committed after it (None: timed out).
    Workers that died on their own meanwhile are restarted (and counted), as a supervisor would."""
    since_us = int(since * 1_000_000)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        env.pool.restart_unexpectedly_exited()
        try:
            lagging = lagging_shards([s.shard_id for s in env.shards()], env.leases(), since_us)
        except Exception as error:  # the emulator may still be slow right after a fault: look again
            log.debug("recovery probe failed: %s", error)
            lagging = ["?"]
        if not lagging:
            return time.time() - since
        time.sleep(0.5)
    return None


def _wait_drained(env: ChaosEnvironment, timeout: float) -> bool:
    """Whether every shard's checkpoint covers its last record within `timeout` (the load has stopped)."""
    retained = env.ledger.read_retained()
    last = {shard: records[-1].sequence for shard, records in retained.items() if records}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        env.pool.restart_unexpectedly_exited()
        if not undelivered_shards(last, env.leases()):
            return True
        time.sleep(0.5)
    return False


def _stop_background(report: ChaosReport, background: BackgroundApply) -> None:
    """Stop the background apply job (once: a second call finds it stopped) and record what it did."""
    if report.apply:
        return
    stats = background.stop()
    report.apply = {"runs": stats.runs, "restarts": len(stats.failures), "failures": stats.failures[:10],
                    "interrupted_by_stop": stats.interrupted_by_stop,
                    "duplicates_absorbed": stats.duplicates_absorbed}  # fmt: skip


def _check(env: ChaosEnvironment, report: ChaosReport, spark: Any, catch_up_timeout_s: float, say: Echo) -> None:
    say("reading the stream and both topics back; checking")
    changes = env.ledger.all_changes()
    messages = read_mutation_topic(env.endpoints.kafka_bootstrap, env.mutation_topic)
    delivery = check_delivery(changes, messages)
    order = check_key_order(messages)
    report.stream_records, report.expected_messages = delivery.records, delivery.expected_messages
    report.records_trimmed = len(env.ledger.trimmed)
    report.trim_mismatches = env.ledger.mismatched_trims
    report.messages, report.duplicates, report.keys = order.messages, order.duplicates, order.keys
    report.lost, report.lost_by_trim = delivery.lost, delivery.lost_by_trim
    report.lost_examples = [f"{c.key.decode()} {c.shard_id} {c.sequence}" for c in delivery.missing[:10]]
    report.unexplained_messages = delivery.unexplained_messages
    report.snapshot_messages = delivery.snapshot_messages
    report.order_violations = len(order.violations)
    report.order_violation_examples = [v.describe() for v in order.violations[:10]]
    report.keys_in_several_partitions = len(order.split_keys)

    source = read_source_rows(env.ots, TABLE, PK_NAMES)
    report.rows_source = len(source)
    _check_images(env, report, changes, source)

    say("running the apply job until the target catches up; comparing it with the source")
    catch_up = apply_until_equal(env.config, spark, TABLE, source, pk_names=PK_NAMES, timeout=catch_up_timeout_s)
    target = read_delta_rows(spark, Path(env.config.apply.delta_path) / TABLE, PK_NAMES)
    report.rows_target = len(target)
    report.target_mismatches, report.mismatch_examples = len(catch_up.mismatches), catch_up.mismatches[:10]
    report.counter_mismatches = len(counter_mismatches(source, target, COUNTER_COLUMNS))
    report.apply["runs"] = report.apply.get("runs", 0) + catch_up.runs
    report.apply["duplicates_absorbed"] = report.apply.get("duplicates_absorbed", 0) + catch_up.duplicates_absorbed
    report.apply["catch_up_seconds"] = round(catch_up.seconds, 1)


def _check_images(
    env: ChaosEnvironment, report: ChaosReport, changes: list[SourceChange], source: dict[tuple, dict[str, Any]]
) -> None:
    """The image topic against the same stream records and the source's final rows."""
    images = read_image_topic(env.endpoints.kafka_bootstrap, env.image_topic)
    tombstones = env.config.source.tables[0].tombstones
    delivery = check_image_delivery(changes, images, tombstones=tombstones)
    order = check_image_order(images)
    state = check_image_state(images, source, COUNTER_COLUMNS)
    report.image_expected_messages, report.image_messages = delivery.expected_messages, order.messages
    report.image_duplicates, report.image_keys = order.duplicates, order.keys
    report.image_tombstones, report.image_partial = state.tombstones, state.partial_images
    report.images_lost, report.images_lost_by_trim = delivery.lost, delivery.lost_by_trim
    report.images_lost_examples = [f"{c.key.decode()} {c.shard_id} {c.sequence}" for c in delivery.missing[:10]]
    report.image_unexplained_messages = delivery.unexplained_messages
    report.image_snapshot_messages = delivery.snapshot_messages
    report.image_order_violations = len(order.violations)
    report.image_order_violation_examples = [v.describe() for v in order.violations[:10]]
    report.image_keys_in_several_partitions = len(order.split_keys)
    report.image_rows, report.image_state_mismatches = state.rows_image, len(state.mismatches)
    report.image_counter_mismatches = len(state.counter_mismatches)
    report.image_partial_without_delete = len(state.partial_without_delete)
    report.image_mismatch_examples = state.mismatches[:10] + [
        f"partial image without a later delete: {p}" for p in state.partial_without_delete[:5]
    ]
