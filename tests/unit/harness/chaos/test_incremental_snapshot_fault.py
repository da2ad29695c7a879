"""The incremental_snapshot fault against fakes (no servers, no processes): a signal row is written and waited for;
a killed exporter is killed after its chunks and run again with its id until the snapshot is DONE; once the snapshot
has emitted a chunk, one of four faults (the real injectors, on fakes) overlaps it; a snapshot that ends otherwise is
a harness error."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cdcbridge.harness.chaos import injectors
from cdcbridge.harness.chaos.errors import ChaosError
from cdcbridge.harness.chaos.injectors import FaultTimings, incremental_snapshot
from cdcbridge.snapshot.incremental_state import IncrementalSnapshot, IncrementalState


class _Choose(random.Random):
    """Picks the given snapshot way and overlapping fault; anything else as a seeded random would."""

    def __init__(self, how: str, overlap: str = "shard_split") -> None:
        super().__init__(0)
        self._picks = (how, overlap)

    def choice(self, seq: Any) -> Any:
        picked = [pick for pick in self._picks if pick in seq]
        return picked[0] if picked else super().choice(seq)


@dataclass
class _Store:
    """The snapshot rows as the injector reads them (the fake exporters and signal rows write them)."""

    rows: dict[str, IncrementalSnapshot] = field(default_factory=dict)
    #: What a snapshot's row becomes on its second read (the exporter went on meanwhile).
    ends: dict[str, IncrementalSnapshot] = field(default_factory=dict)
    reads: int = 0
    read_ids: set[str] = field(default_factory=set)

    def list_snapshots(self, stream_id: str, table: str) -> list[IncrementalSnapshot]:
        return sorted(self.rows.values(), key=lambda s: s.snapshot_id)

    def read(self, stream_id: str, snapshot_id: str) -> IncrementalSnapshot | None:
        self.reads += 1
        if snapshot_id in self.read_ids and snapshot_id in self.ends:
            self.rows[snapshot_id] = self.ends.pop(snapshot_id)
        self.read_ids.add(snapshot_id)
        return self.rows.get(snapshot_id)


class _Ots:
    """A signal row is picked up at once: RUNNING with one chunk emitted; a later read finds it ended."""

    def __init__(self, store: _Store, end: IncrementalState) -> None:
        self.store, self.end, self.puts = store, end, []

    def put_row(self, table: str, row: Any, condition: Any) -> None:
        key = dict(row.primary_key)
        self.puts.append((table, key, dict(row.attribute_columns)))
        snapshot_id = key["StatusValue"]
        self.store.rows[snapshot_id] = IncrementalSnapshot("stream", snapshot_id, "chaos", IncrementalState.RUNNING,
                                                           rows=50, chunks=1, exporter_id="w1-0-abcdef12")  # fmt: skip
        self.store.ends[snapshot_id] = replace(self.store.rows[snapshot_id], state=self.end, rows=200, chunks=4)


class _Process:
    def __init__(self, on_wait: Any = None, code: int = 0) -> None:
        self.on_wait, self.code, self.killed = on_wait, code, False

    def poll(self) -> int | None:
        return None if not self.killed and self.on_wait is None else self.code

    def kill(self) -> None:
        self.killed = True

    def wait(self, timeout: float) -> int:
        if self.on_wait is not None:
            self.on_wait()
        return -9 if self.killed else self.code


@dataclass
class _Faults:
    """The pool, the emulator admin and the broker the overlapping faults act on; each event notes the state of the
    snapshot rows at that moment (the overlap must come while the snapshot runs, after a chunk)."""

    store: _Store
    events: list[str] = field(default_factory=list)
    live: list[SimpleNamespace] = field(default_factory=lambda: [SimpleNamespace(worker_id="chaos-w1-1")])

    def _note(self, what: str) -> None:
        states = ",".join(f"{s.state.value}/{s.chunks}" for s in self.store.list_snapshots("stream", "chaos"))
        self.events.append(f"{what} [{states}]")

    def live_slots(self) -> list[SimpleNamespace]:
        return self.live

    def kill(self, slot: SimpleNamespace) -> None:
        self._note(f"kill {slot.worker_id}")

    def start(self, slot: SimpleNamespace) -> str:
        self._note(f"start {slot.worker_id}")
        return "chaos-w1-2"

    def split(self, table: str, shard: str) -> list[str]:
        self._note(f"split {shard}")
        return [f"{shard}a", f"{shard}b"]

    def merge(self, table: str, first: str, second: str) -> str:
        self._note(f"merge {first} {second}")
        return "s3"

    def restart_kafka(self, state_dir: Path, *, hard: bool, down_seconds: float) -> None:
        self._note("restart kafka")


def _env(store: _Store, end: IncrementalState = IncrementalState.DONE, faults: _Faults | None = None) -> Any:
    faults = faults or _Faults(store)
    return SimpleNamespace(ots=_Ots(store, end), config=SimpleNamespace(coordination=SimpleNamespace(
        status_table="status")), stream_id="stream", table="chaos", work_dir=Path("/nonexistent"), pool=faults,
        admin=faults, leases=lambda: {}, open_shard_ids=lambda: ["s1", "s2"],
        stack=SimpleNamespace(state_dir=Path("/nonexistent")))  # fmt: skip


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> _Store:
    fake = _Store()
    monkeypatch.setattr(injectors, "IncrementalSnapshotStore", lambda ots, table: fake)
    monkeypatch.setattr(injectors.time, "sleep", lambda seconds: None)
    return fake


def test_a_signal_row_is_written_and_waited_for(store: _Store) -> None:
    env = _env(store)
    injection = incremental_snapshot(env, _Choose("signal row", "shard_split"), FaultTimings())
    ((table, key, columns),) = env.ots.puts
    assert table == "status" and key["StatusType"] == "IncrementalSnapshot" and key["StreamId"] == "stream"
    assert columns == {"Table": "chaos", "State": "PENDING"}
    assert "by signal row: DONE, 200 rows in 4 chunks" in injection.detail and "finished by w1-0" in injection.detail
    assert env.pool.events == ["split s1 [RUNNING/1]"] or env.pool.events == ["split s2 [RUNNING/1]"]
    assert "; during it (after 1 chunks), shard_split: split s" in injection.detail


@pytest.mark.parametrize(
    ("overlap", "events", "said"),
    [
        ("worker_kill", [r"kill chaos-w1-1 \[RUNNING/1\]", r"start chaos-w1-1 \[RUNNING/1\]"],
         "worker_kill: kill -9 chaos-w1-1, restarted as chaos-w1-2 after"),
        ("shard_split", [r"split s[12] \[RUNNING/1\]"], "shard_split: split s"),
        ("shard_merge", [r"merge s[12] s[12] \[RUNNING/1\]"], "shard_merge: merged s"),
        ("kafka_restart", [r"restart kafka \[RUNNING/1\]"], "kafka_restart: Kafka broker SIG"),
    ],
)  # fmt: skip
def test_each_overlapping_fault_fires_while_the_cli_snapshot_runs_after_a_chunk(
    store: _Store, monkeypatch: pytest.MonkeyPatch, overlap: str, events: list[str], said: str
) -> None:
    running = IncrementalSnapshot("stream", "0001-new", "chaos", IncrementalState.RUNNING, rows=50, chunks=1,
                                  exporter_id="host-1-aaaaaaaa")  # fmt: skip
    faults = _Faults(store)
    monkeypatch.setattr(injectors, "restart_kafka", faults.restart_kafka)

    def exporter_ends() -> None:
        faults._note("exporter ended")
        store.rows["0001-new"] = replace(running, state=IncrementalState.DONE, rows=150, chunks=3)

    def process(env: Any, *args: str) -> Any:
        store.rows["0001-new"] = running  # it emitted its first chunk
        return SimpleNamespace(poll=lambda: None, wait=lambda timeout: exporter_ends())

    monkeypatch.setattr(injectors, "_snapshot_process", process)
    injection = incremental_snapshot(_env(store, faults=faults), _Choose("cli", overlap), FaultTimings())
    assert len(faults.events) == len(events) + 1, faults.events
    assert all(re.fullmatch(pattern, event) for pattern, event in zip(events, faults.events, strict=False))
    assert faults.events[-1] == "exporter ended [RUNNING/1]"  # the cli way still waits for its exporter
    assert "by cli: DONE, 150 rows in 3 chunks" in injection.detail
    assert f"; during it (after 1 chunks), {said}" in injection.detail


def test_a_snapshot_already_over_when_the_overlap_fires_is_said_not_failed(
    store: _Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = IncrementalSnapshot("stream", "0001-new", "chaos", IncrementalState.DONE, rows=50, chunks=1,
                               exporter_id="host-1-aaaaaaaa")  # fmt: skip

    def process(env: Any, *args: str) -> Any:
        store.rows["0001-new"] = done  # a one-chunk table: over before the harness looks
        return SimpleNamespace(poll=lambda: 0, wait=lambda timeout: 0)

    monkeypatch.setattr(injectors, "_snapshot_process", process)
    env = _env(store)
    injection = incremental_snapshot(env, _Choose("cli", "worker_kill"), FaultTimings())
    assert env.pool.events[0] == "kill chaos-w1-1 [DONE/1]"
    assert "; after it (it had already finished, 1 chunks), worker_kill: kill -9 chaos-w1-1" in injection.detail


def test_a_killed_exporter_is_run_again_with_its_id_until_done(store: _Store, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple[str, ...]] = []
    running = IncrementalSnapshot("stream", "0001-new", "chaos", IncrementalState.RUNNING, chunks=2,
                                  exporter_id="host-1-aaaaaaaa")  # fmt: skip

    def finish() -> None:
        store.rows["0001-new"] = replace(running, state=IncrementalState.DONE, exporter_id="host-2-bbbbbbbb")

    def process(env: Any, *args: str) -> _Process:
        started.append(args)
        if len(started) == 1:
            store.rows["0001-new"] = running  # the first exporter emitted chunks
            return _Process()
        return _Process(on_wait=finish)

    monkeypatch.setattr(injectors, "_snapshot_process", process)
    env = _env(store)
    injection = incremental_snapshot(env, _Choose("cli killed -9 and run again", "worker_kill"), FaultTimings())
    assert started == [("--table", "chaos"), ("--table", "chaos", "--id", "0001-new")]
    # The worker was killed while the first exporter ran (before it was killed and run again).
    assert env.pool.events == ["kill chaos-w1-1 [RUNNING/2]", "start chaos-w1-1 [RUNNING/2]"]
    assert "by cli killed -9 and run again (killed after" in injection.detail
    assert "DONE" in injection.detail and "finished by host-2" in injection.detail
    assert "; during it (after 2 chunks), worker_kill: kill -9 chaos-w1-1" in injection.detail


def test_a_snapshot_that_ends_cancelled_is_a_harness_error(store: _Store) -> None:
    with pytest.raises(ChaosError, match="ended CANCELLED"):
        incremental_snapshot(_env(store, IncrementalState.CANCELLED), _Choose("signal row"), FaultTimings())
