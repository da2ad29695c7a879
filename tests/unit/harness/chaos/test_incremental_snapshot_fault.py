"""The incremental_snapshot fault against fakes (no servers, no processes): a signal row is written and waited for;
a killed exporter is killed after its chunks and run again with its id until the snapshot is DONE; a snapshot that
ends otherwise is a harness error."""

from __future__ import annotations

import random
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
    def __init__(self, how: str) -> None:
        super().__init__(0)
        self._how = how

    def choice(self, seq: Any) -> Any:
        return self._how if self._how in seq else super().choice(seq)


@dataclass
class _Store:
    """The snapshot rows as the injector reads them (the fake exporters and signal rows write them)."""

    rows: dict[str, IncrementalSnapshot] = field(default_factory=dict)
    reads: int = 0

    def list_snapshots(self, stream_id: str, table: str) -> list[IncrementalSnapshot]:
        return sorted(self.rows.values(), key=lambda s: s.snapshot_id)

    def read(self, stream_id: str, snapshot_id: str) -> IncrementalSnapshot | None:
        self.reads += 1
        return self.rows.get(snapshot_id)


class _Ots:
    def __init__(self, store: _Store, end: IncrementalState) -> None:
        self.store, self.end, self.puts = store, end, []

    def put_row(self, table: str, row: Any, condition: Any) -> None:
        key = dict(row.primary_key)
        self.puts.append((table, key, dict(row.attribute_columns)))
        snapshot_id = key["StatusValue"]
        self.store.rows[snapshot_id] = IncrementalSnapshot("stream", snapshot_id, "chaos", self.end, rows=200,
                                                           chunks=4, exporter_id="w1-0-abcdef12")  # fmt: skip


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


def _env(store: _Store, end: IncrementalState = IncrementalState.DONE) -> Any:
    return SimpleNamespace(ots=_Ots(store, end), config=SimpleNamespace(coordination=SimpleNamespace(
        status_table="status")), stream_id="stream", table="chaos", work_dir=Path("/nonexistent"))  # fmt: skip


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> _Store:
    fake = _Store()
    monkeypatch.setattr(injectors, "IncrementalSnapshotStore", lambda ots, table: fake)
    monkeypatch.setattr(injectors.time, "sleep", lambda seconds: None)
    return fake


def test_a_signal_row_is_written_and_waited_for(store: _Store) -> None:
    env = _env(store)
    injection = incremental_snapshot(env, _Choose("signal row"), FaultTimings())
    ((table, key, columns),) = env.ots.puts
    assert table == "status" and key["StatusType"] == "IncrementalSnapshot" and key["StreamId"] == "stream"
    assert columns == {"Table": "chaos", "State": "PENDING"}
    assert "by signal row: DONE, 200 rows in 4 chunks" in injection.detail and "finished by w1-0" in injection.detail


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
    injection = incremental_snapshot(_env(store), _Choose("cli killed -9 and run again"), FaultTimings())
    assert started == [("--table", "chaos"), ("--table", "chaos", "--id", "0001-new")]
    assert "by cli killed -9 and run again (killed after" in injection.detail
    assert "DONE" in injection.detail and "finished by host-2" in injection.detail


def test_a_snapshot_that_ends_cancelled_is_a_harness_error(store: _Store) -> None:
    with pytest.raises(ChaosError, match="ended CANCELLED"):
        incremental_snapshot(_env(store, IncrementalState.CANCELLED), _Choose("signal row"), FaultTimings())
