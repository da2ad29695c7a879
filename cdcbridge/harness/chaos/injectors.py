"""One injector per fault kind: inject the fault, hold it, undo it, and say when it was over.

Each injector returns an :class:`Injection`: a line describing what it did and the wall time at which the fault
ended (the worker restarted, the broker answered again, the fault rules were cleared...). Recovery is measured
from that moment. All choices (victim, shard, durations, fault parameters) come from the cycle's seeded random.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.harness.chaos.environment import ChaosEnvironment
from cdcbridge.harness.chaos.errors import ChaosError
from cdcbridge.harness.chaos.schedule import FaultKind
from cdcbridge.harness.chaos.workers import WorkerSlot
from cdcbridge.harness.emulator_admin import EmulatorAdminError
from cdcbridge.harness.stack.kafka import restart_kafka
from cdcbridge.snapshot.incremental_state import IncrementalSnapshot, IncrementalSnapshotStore, IncrementalState

#: The write APIs of the Tablestore protocol (the load's and the lease store's).
WRITE_APIS = ("PutRow", "UpdateRow", "DeleteRow", "BatchWriteRow")
#: How long an incremental snapshot of the chaos table may take (its chunks wait for every shard's owner).
SNAPSHOT_TIMEOUT_SECONDS = 240.0
#: How long a registry outage waits for the restarted worker to try the registry (it starts in a few seconds).
REGISTRY_MEET_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class FaultTimings:
    """How long faults last (seconds, drawn uniformly from each range)."""

    window: tuple[float, float] = (3.0, 6.0)
    kill_down: tuple[float, float] = (0.0, 2.0)
    #: A zombie stays stopped for the lease duration plus this, so its leases expire and peers take them.
    zombie_extra: tuple[float, float] = (1.0, 4.0)
    kafka_down: tuple[float, float] = (1.0, 4.0)


@dataclass(frozen=True)
class Injection:
    detail: str
    #: Wall time (time.time()) at which the fault was over.
    healed_at: float


Injector = Callable[[ChaosEnvironment, random.Random, FaultTimings], Injection]


def _hold(rng: random.Random, span: tuple[float, float]) -> float:
    seconds = rng.uniform(*span)
    time.sleep(seconds)
    return seconds


def _lease_holder(env: ChaosEnvironment, rng: random.Random) -> WorkerSlot:
    """A live worker that owns unfinished leases (so the fault matters), else any live worker."""
    owners = {lease.owner for lease in env.leases().values() if not lease.is_finished and lease.owner}
    live = env.pool.live_slots()
    if not live:
        raise ChaosError("no bridge worker is running to inject the fault into; see the worker logs")
    holders = [slot for slot in live if slot.worker_id in owners]
    return rng.choice(holders or live)


def kill_worker(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    slot = _lease_holder(env, rng)
    victim = slot.worker_id
    env.pool.kill(slot)
    down = _hold(rng, timings.kill_down)
    restarted = env.pool.start(slot)
    return Injection(f"kill -9 {victim}, restarted as {restarted} after {down:.1f}s", time.time())


def freeze_worker(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    """SIGSTOP past the lease duration: peers take its leases; SIGCONT wakes a zombie that still thinks it owns
    them. The detail says how many of its leases peers took while it was stopped (the fault did what it claims)."""
    slot = _lease_holder(env, rng)
    assert slot.process is not None
    victim = slot.worker_id
    held = _unfinished_shards_of(env, victim)
    frozen = env.lease_duration + rng.uniform(*timings.zombie_extra)
    slot.process.freeze()
    try:
        time.sleep(frozen)
        still_held = _unfinished_shards_of(env, victim)
    finally:
        slot.process.thaw()
    taken = len(held - still_held)
    return Injection(
        f"SIGSTOP {victim} for {frozen:.1f}s (lease {env.lease_duration:.0f}s): peers took {taken} of its "
        f"{len(held)} leases; SIGCONT",
        time.time(),
    )


def _unfinished_shards_of(env: ChaosEnvironment, worker_id: str) -> set[str]:
    return {lease.shard_id for lease in env.leases().values() if lease.owner == worker_id and not lease.is_finished}


def split_shard(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    shard = rng.choice(env.open_shard_ids())
    children = env.admin.split(env.table, shard)
    return Injection(f"split {shard} into {', '.join(children)}", time.time())


def merge_shards(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    """Merge two adjacent open shards; with one open shard, split it first (so there is something to merge)."""
    prefix = ""
    open_ids = env.open_shard_ids()
    if len(open_ids) < 2:
        prefix = split_shard(env, rng, timings).detail + ", then "
        open_ids = env.open_shard_ids()
    pairs = [(a, b) for i, a in enumerate(open_ids) for b in open_ids[i + 1 :]]
    rng.shuffle(pairs)
    for first, second in pairs:
        try:
            child = env.admin.merge(env.table, first, second)
        except EmulatorAdminError as error:  # 400: not adjacent (the API does not show hash ranges: try the next)
            if error.status != 400:
                raise
            continue
        return Injection(f"{prefix}merged {first} and {second} into {child}", time.time())
    raise ChaosError(f"no two of the open shards {open_ids} could be merged (none adjacent?)")


def restart_broker(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    hard = rng.random() < 0.5
    down = rng.uniform(*timings.kafka_down)
    started = time.monotonic()
    restart_kafka(env.stack.state_dir, hard=hard, down_seconds=down)
    signal_name = "SIGKILL" if hard else "SIGTERM"
    return Injection(
        f"Kafka broker {signal_name}, down {down:.1f}s, answering again after {time.monotonic() - started:.1f}s",
        time.time(),
    )


def registry_outage(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    """The registry goes away while a worker restarts: the new worker must wait for it before producing."""
    proxy = env.registry_proxy
    refused_before = proxy.refused
    started = time.monotonic()
    proxy.close()
    try:
        slot = _lease_holder(env, rng)
        victim = slot.worker_id
        env.pool.kill(slot)
        restarted = env.pool.start(slot)
        # Hold the outage until the new worker has met it (its start-up takes seconds), then a while longer.
        deadline = time.monotonic() + REGISTRY_MEET_TIMEOUT_SECONDS
        while proxy.refused == refused_before and time.monotonic() < deadline:
            time.sleep(0.1)
        _hold(rng, timings.window)
    finally:
        proxy.open()
    return Injection(
        f"registry unreachable for {time.monotonic() - started:.1f}s while {victim} was killed and restarted as "
        f"{restarted} ({proxy.refused - refused_before} connections refused)",
        time.time(),
    )


def _emulator_faults(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings,
                     rules: list[dict[str, Any]], what: str) -> Injection:  # fmt: skip
    env.admin.set_faults(rules, seed=rng.randrange(2**31))
    try:
        held = _hold(rng, timings.window)
    finally:
        env.admin.clear_faults()
    return Injection(f"{what} for {held:.1f}s", time.time())


def emulator_latency(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    latency, probability = rng.choice((200, 500, 1000)), rng.choice((0.3, 0.6))
    rule = {"api": "*", "latency_ms": latency, "probability": probability}
    return _emulator_faults(env, rng, timings, [rule], f"{latency} ms latency on {probability:.0%} of all calls")


def emulator_errors(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    code, probability = rng.choice(("OTSInternalServerError", "OTSServerUnavailable", "OTSTimeout")), 0.3
    rule = {"api": "*", "error_code": code, "probability": probability}
    return _emulator_faults(env, rng, timings, [rule], f"{code} on {probability:.0%} of all calls")


def emulator_throttling(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    code, probability = rng.choice(("OTSServerBusy", "OTSFlowControl")), 0.5
    rule = {"api": "*", "error_code": code, "probability": probability}
    return _emulator_faults(env, rng, timings, [rule], f"{code} on {probability:.0%} of all calls")


def ambiguous_writes(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    probability = rng.choice((0.2, 0.4))
    rules = [{"api": api, "drop_response": True, "probability": probability} for api in WRITE_APIS]
    what = f"{probability:.0%} of writes ({', '.join(WRITE_APIS)}) applied, then the connection dropped"
    return _emulator_faults(env, rng, timings, rules, what)


def trim_stream(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    result = env.ledger.trim_checkpointed(env.leases())
    if not result.kept:
        return Injection("trim: no record older than every shard's checkpoint yet", time.time())
    detail = f"trimmed {result.dropped} records committed before {result.before_ms} ms (all checkpointed)"
    if result.dropped != result.kept:
        detail += f"; the ledger kept {result.kept}: MISMATCH"
    return Injection(detail, time.time())


def incremental_snapshot(env: ChaosEnvironment, rng: random.Random, timings: FaultTimings) -> Injection:
    """An incremental snapshot of the chaos table while the load and the workers go on: by `cdcbridge snapshot`
    (a process; sometimes killed -9 part-way and run again with its id, or taken over by a worker), or by a signal
    row the workers pick up. Once it has emitted a chunk, one more fault overlaps it (issue 31: its invariants hold
    under every fault). Over once the snapshot is DONE; the end-of-run checks judge what it sent."""
    store = IncrementalSnapshotStore(env.ots, env.config.coordination.status_table)
    how = rng.choice(("cli", "cli killed -9 and run again", "signal row"))
    overlap = rng.choice(tuple(SNAPSHOT_OVERLAPS))
    started = time.monotonic()
    known = {s.snapshot_id for s in store.list_snapshots(env.stream_id, env.table)}
    if how == "signal row":
        snapshot_id = f"chaos-{uuid.uuid4().hex[:8]}"
        env.ots.put_row(env.config.coordination.status_table, Row(
            [("StreamId", env.stream_id), ("StatusType", "IncrementalSnapshot"), ("StatusValue", snapshot_id)],
            [("Table", env.table), ("State", IncrementalState.PENDING.value)],
        ), Condition(RowExistenceExpectation.EXPECT_NOT_EXIST))  # fmt: skip
        _wait_for_chunks(store, env, known, None, wanted=1)
        during = _overlap(store, env, rng, timings, snapshot_id, overlap)
    else:
        first = _snapshot_process(env, "--table", env.table)
        wanted = 1 if how == "cli" else rng.randint(1, 2)
        snapshot_id = _wait_for_chunks(store, env, known, first, wanted=wanted)
        during = _overlap(store, env, rng, timings, snapshot_id, overlap)
        if how == "cli":
            first.wait(SNAPSHOT_TIMEOUT_SECONDS)
        else:
            if first.poll() is None:
                first.kill()
                first.wait(30)
                how += f" (killed after {time.monotonic() - started:.1f}s)"
            _run_again(store, env, snapshot_id)
    done = _wait_snapshot(store, env, snapshot_id)
    finished_by = done.exporter_id.rsplit("-", 1)[0]
    detail = (f"incremental snapshot {snapshot_id} by {how}: {done.state.value}, {done.rows} rows in {done.chunks} "
              f"chunks, {time.monotonic() - started:.1f}s, finished by {finished_by}; {during}")  # fmt: skip
    return Injection(detail, time.time())


def _overlap(store: IncrementalSnapshotStore, env: ChaosEnvironment, rng: random.Random, timings: FaultTimings,
             snapshot_id: str, overlap: str) -> str:  # fmt: skip
    """Inject the overlapping fault; say whether the snapshot was still running when it fired (a small table's
    snapshot may be over already: that is reported, not failed)."""
    current = store.read(env.stream_id, snapshot_id)
    running = current is None or not current.state.finished
    chunks = 0 if current is None else current.chunks
    injection = SNAPSHOT_OVERLAPS[overlap](env, rng, timings)
    if running:
        return f"during it (after {chunks} chunks), {overlap}: {injection.detail}"
    return f"after it (it had already finished, {chunks} chunks), {overlap}: {injection.detail}"


def _snapshot_process(env: ChaosEnvironment, *args: str) -> subprocess.Popen[bytes]:
    logs = env.work_dir / "snapshots"
    logs.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "cdcbridge", "snapshot", *args, "--config", str(env.config_path)]
    with (logs / "exporters.log").open("ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _newest_snapshot(store: IncrementalSnapshotStore, env: ChaosEnvironment, known: set[str]) -> str:
    """The id of the snapshot the exporter process ran: a new one, else the unfinished one it picked up."""
    snapshots = store.list_snapshots(env.stream_id, env.table)
    new = [s.snapshot_id for s in snapshots if s.snapshot_id not in known]
    if new:
        return new[-1]
    unfinished = [s.snapshot_id for s in snapshots if not s.state.finished]
    if unfinished:  # it was refused: another exporter (a worker) runs the table's snapshot
        return unfinished[-1]
    raise ChaosError(f"the snapshot process made no snapshot; see {env.work_dir / 'snapshots' / 'exporters.log'}")


def _wait_for_chunks(store: IncrementalSnapshotStore, env: ChaosEnvironment, known: set[str],
                     process: subprocess.Popen[bytes] | None, wanted: int) -> str:  # fmt: skip
    """The id of the new snapshot once it has emitted `wanted` chunks (or ended); `process` is its exporter, if
    the harness started one (a signal row's snapshot is run by a worker)."""
    deadline = time.monotonic() + SNAPSHOT_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return _newest_snapshot(store, env, known)
        snapshots = [s for s in store.list_snapshots(env.stream_id, env.table) if s.snapshot_id not in known]
        if snapshots and (snapshots[-1].chunks >= wanted or snapshots[-1].state.finished):
            return snapshots[-1].snapshot_id
        time.sleep(0.2)
    raise ChaosError(f"the snapshot process emitted no chunk in {SNAPSHOT_TIMEOUT_SECONDS:.0f}s")


def _run_again(store: IncrementalSnapshotStore, env: ChaosEnvironment, snapshot_id: str) -> None:
    """Run the killed snapshot again with its id until it ends; refused while the dead exporter's heartbeat is
    young, and done already if a worker took it over meanwhile."""
    deadline = time.monotonic() + SNAPSHOT_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        current = store.read(env.stream_id, snapshot_id)
        if current is not None and current.state.finished:
            return
        again = _snapshot_process(env, "--table", env.table, "--id", snapshot_id)
        if again.wait(SNAPSHOT_TIMEOUT_SECONDS) == 0:
            return
        time.sleep(2.0)


def _wait_snapshot(store: IncrementalSnapshotStore, env: ChaosEnvironment, snapshot_id: str) -> IncrementalSnapshot:
    deadline = time.monotonic() + SNAPSHOT_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        current = store.read(env.stream_id, snapshot_id)
        if current is not None and current.state.finished:
            if current.state is not IncrementalState.DONE:
                raise ChaosError(f"incremental snapshot {snapshot_id} ended {current.state.value}: {current.error}")
            return current
        time.sleep(0.5)
    raise ChaosError(f"incremental snapshot {snapshot_id} did not finish in {SNAPSHOT_TIMEOUT_SECONDS:.0f}s")


INJECTORS: dict[FaultKind, Injector] = {
    FaultKind.WORKER_KILL: kill_worker,
    FaultKind.WORKER_ZOMBIE: freeze_worker,
    FaultKind.SHARD_SPLIT: split_shard,
    FaultKind.SHARD_MERGE: merge_shards,
    FaultKind.KAFKA_RESTART: restart_broker,
    FaultKind.REGISTRY_OUTAGE: registry_outage,
    FaultKind.EMULATOR_LATENCY: emulator_latency,
    FaultKind.EMULATOR_ERRORS: emulator_errors,
    FaultKind.EMULATOR_THROTTLING: emulator_throttling,
    FaultKind.AMBIGUOUS_WRITES: ambiguous_writes,
    FaultKind.STREAM_TRIM: trim_stream,
    FaultKind.INCREMENTAL_SNAPSHOT: incremental_snapshot,
}
#: The faults an incremental snapshot is overlapped with, once it has emitted a chunk (one, seeded, per snapshot).
SNAPSHOT_OVERLAPS: dict[str, Injector] = {
    FaultKind.WORKER_KILL.value: kill_worker,
    FaultKind.SHARD_SPLIT.value: split_shard,
    FaultKind.SHARD_MERGE.value: merge_shards,
    FaultKind.KAFKA_RESTART.value: restart_broker,
}
