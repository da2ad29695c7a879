"""Fault injectors against a fake environment: each does what its report line claims (no servers, no sleeping)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.harness.chaos import injectors
from cdcbridge.harness.chaos.injectors import FaultTimings, freeze_worker, kill_worker, merge_shards
from cdcbridge.harness.emulator_admin import EmulatorAdminError


@dataclass
class FakeProcess:
    signals: list[str] = field(default_factory=list)

    def freeze(self) -> None:
        self.signals.append("SIGSTOP")

    def thaw(self) -> None:
        self.signals.append("SIGCONT")


@dataclass
class FakeSlot:
    worker_id: str
    process: FakeProcess = field(default_factory=FakeProcess)


@dataclass
class FakePool:
    slots: list[FakeSlot]
    events: list[str] = field(default_factory=list)

    def live_slots(self) -> list[FakeSlot]:
        return self.slots

    def kill(self, slot: FakeSlot) -> None:
        self.events.append(f"kill {slot.worker_id}")

    def start(self, slot: FakeSlot) -> str:
        slot.worker_id = slot.worker_id[:-1] + str(int(slot.worker_id[-1]) + 1)
        self.events.append(f"start {slot.worker_id}")
        return slot.worker_id


@dataclass
class FakeEnv:
    pool: FakePool
    owners: dict[str, str]
    lease_duration: float = 6.0
    open_shards: list[str] = field(default_factory=list)
    admin: Any = None
    table: str = "t"

    def leases(self) -> dict[str, Lease]:
        return {shard: Lease("stream", shard, owner=owner) for shard, owner in self.owners.items()}

    def open_shard_ids(self) -> list[str]:
        return list(self.open_shards)


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    seconds: list[float] = []
    monkeypatch.setattr(injectors.time, "sleep", seconds.append)
    return seconds


def test_a_zombie_is_stopped_past_its_lease_and_the_line_says_what_peers_took(
    slept: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = FakePool([FakeSlot("w1-1"), FakeSlot("w2-1")])
    env = FakeEnv(pool, {"s1": "w1-1", "s2": "w1-1", "s3": ""})  # w1-1 is the only lease holder: the victim

    def peer_takes_s1(seconds: float) -> None:
        slept.append(seconds)
        env.owners["s1"] = "w2-1"

    monkeypatch.setattr(injectors.time, "sleep", peer_takes_s1)
    injection = freeze_worker(env, random.Random(1), FaultTimings(zombie_extra=(1.0, 2.0)))  # type: ignore[arg-type]
    assert [slot.process.signals for slot in pool.slots] == [["SIGSTOP", "SIGCONT"], []]
    assert len(slept) == 1 and 7.0 <= slept[0] <= 8.0  # lease 6 s + 1..2 s
    assert injection.detail.startswith("SIGSTOP w1-1 for 7.")
    assert "peers took 1 of its 2 leases; SIGCONT" in injection.detail


def test_a_killed_worker_comes_back_under_a_new_id(slept: list[float]) -> None:
    pool = FakePool([FakeSlot("w1-1"), FakeSlot("w2-1")])
    env = FakeEnv(pool, {"s1": "w2-1"})
    injection = kill_worker(env, random.Random(3), FaultTimings(kill_down=(0.5, 0.5)))  # type: ignore[arg-type]
    assert pool.events == ["kill w2-1", "start w2-2"]  # the only lease holder is the victim
    assert slept == [0.5]
    assert injection.detail == "kill -9 w2-1, restarted as w2-2 after 0.5s"


def test_a_merge_with_one_open_shard_splits_it_first_and_skips_pairs_that_are_not_adjacent() -> None:
    env = FakeEnv(FakePool([FakeSlot("w1-1")]), {}, open_shards=["s1"])
    calls: list[tuple[str, ...]] = []

    class Admin:
        def split(self, table: str, shard_id: str) -> list[str]:
            calls.append(("split", table, shard_id))
            env.open_shards = ["s2", "s3", "s4"]
            return ["s2", "s3"]

        def merge(self, table: str, shard_id: str, sibling_shard_id: str) -> str:
            calls.append(("merge", table, shard_id, sibling_shard_id))
            if {shard_id, sibling_shard_id} != {"s2", "s3"}:
                raise EmulatorAdminError("not adjacent", status=400, code="OTSParameterInvalid")
            return "s5"

    env.admin = Admin()
    injection = merge_shards(env, random.Random(0), FaultTimings())  # type: ignore[arg-type]
    assert calls[0] == ("split", "t", "s1")
    assert injection.detail.startswith("split s1 into s2, s3, then merged ")
    assert injection.detail.endswith(" into s5")


def test_a_merge_the_emulator_fails_for_another_reason_is_not_skipped() -> None:
    env = FakeEnv(FakePool([FakeSlot("w1-1")]), {}, open_shards=["s1", "s2"])

    class Admin:
        def merge(self, table: str, shard_id: str, sibling_shard_id: str) -> str:
            raise EmulatorAdminError("the emulator at http://emulator did not answer POST merge")

    env.admin = Admin()
    with pytest.raises(EmulatorAdminError, match="did not answer"):
        merge_shards(env, random.Random(0), FaultTimings())  # type: ignore[arg-type]
