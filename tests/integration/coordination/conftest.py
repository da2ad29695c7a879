"""Fixtures of the multi-process coordination tests: one emulator process per session, and per test a fresh table
whose recording workers and load writer are always cleaned up (and described when the test fails)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cdcbridge.harness.bench.failover import HarnessError, LoadWriter, WorkerCluster, create_sharded_table, ots_client
from cdcbridge.harness.processes import EmulatorProcess


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """On failure, attach each cluster's lease rows and worker log tails to the report."""
    report = yield
    if report.when == "call" and report.failed:
        for made in item.stash.get(_SCENARIOS, []):
            try:
                report.sections.append((f"cluster of {made.cluster.table}", made.cluster.describe()))
            except Exception as exc:
                report.sections.append((f"cluster of {made.cluster.table}", f"could not describe: {exc!r}"))
    return report


_SCENARIOS = pytest.StashKey[list["Scenario"]]()


@pytest.fixture(scope="session")
def emulator_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    emulator = EmulatorProcess(tmp_path_factory.mktemp("emulator") / "emulator.log")
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


@dataclass
class Scenario:
    """One test's table, its lease table, its worker processes and its load writers."""

    emulator: EmulatorProcess
    ots: Any
    cluster: WorkerCluster
    #: Open shards right after the table was created (the root split this many times over).
    shards: list[str]
    loads: list[LoadWriter] = field(default_factory=list)

    def start_load(self, *, keys: int = 16, rate: float = 25.0, limit: int = 3000) -> LoadWriter:
        load = LoadWriter(self.ots, self.cluster.table, keys=keys, rate=rate, limit=limit).start()
        self.loads.append(load)
        return load

    def close(self) -> None:
        for load in self.loads:
            with contextlib.suppress(HarnessError):  # already reported by the test that stopped it
                load.stop()
        self.cluster.close()


@pytest.fixture
def scenario(
    emulator_process: EmulatorProcess, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[int], Scenario]]:
    """`scenario(shards)` → a fresh table with that many open shards and an empty cluster of workers."""
    made: list[Scenario] = []
    request.node.stash[_SCENARIOS] = made
    ots = ots_client(emulator_process.url)

    def make(shards: int) -> Scenario:
        suffix = uuid.uuid4().hex[:8]
        table, status = f"src_{suffix}", f"status_{suffix}"
        stream_id, open_shards = create_sharded_table(ots, emulator_process.admin, table, shards)
        cluster = WorkerCluster(tmp_path / table, emulator_process.url, table, status, stream_id, ots)
        made.append(Scenario(emulator_process, ots, cluster, open_shards))
        return made[-1]

    try:
        yield make
    finally:
        for each in made:
            each.close()
