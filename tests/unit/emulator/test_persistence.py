"""State in a data directory survives a clean stop, a kill (no final snapshot) and a torn journal tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcbridge.emulator.backend import Backend
from cdcbridge.emulator.conditions import Condition, RowExistence
from cdcbridge.emulator.errors import ConditionCheckFail
from cdcbridge.emulator.journal import Journal, JournalError
from cdcbridge.emulator.keys import PkType, PrimaryKeyColumn
from cdcbridge.emulator.model import CellChange, CellOp, ReadOptions, RowChange, StreamSpec, WriteKind

from .conftest import Clock


def populate(backend: Backend) -> None:
    backend.call("create_table", "t", [PrimaryKeyColumn("id", PkType.INTEGER)], stream=StreamSpec(True, 24))
    for key in range(10):
        backend.call("write_row", "t", RowChange(WriteKind.PUT, [("id", key)], [CellChange("v", value=key)]))
    stream_id = backend.call("list_streams", "t")[0].stream_id
    shard = backend.call("describe_stream", stream_id).shards[0].shard_id
    backend.call("split_shard", "t", shard)
    backend.call("write_row", "t", RowChange(WriteKind.UPDATE, [("id", 3)], [CellChange("n", CellOp.INCREMENT, 2)]))
    backend.call("write_row", "t", RowChange(WriteKind.DELETE, [("id", 4)]))


def state_of(backend: Backend) -> tuple[object, ...]:
    instance = backend.instance
    table = instance.tables["t"]
    rows = {
        key: {name: list(map(tuple, versions)) for name, versions in row.columns.items()}
        for key, row in table.rows.items()
    }
    assert table.stream is not None
    shards = {
        shard.shard_id: (
            shard.parent_id,
            shard.hash_start,
            shard.hash_end,
            shard.closed_at_us,
            [(r.sequence, r.action, r.payload) for r in shard.records],
        )
        for shard in table.stream.shards.values()
    }
    return rows, shards, table.stream.stream_id, table.last_commit_us


def test_clean_stop_and_restart_keeps_everything(tmp_path: Path) -> None:
    clock = Clock()
    first = Backend(data_dir=str(tmp_path), clock_us=lambda: clock.tick())
    populate(first)
    before = state_of(first)
    first.close()
    second = Backend(data_dir=str(tmp_path), clock_us=lambda: clock.tick())
    assert state_of(second) == before
    # Writing on continues the commit clock and the stream.
    second.call("write_row", "t", RowChange(WriteKind.PUT, [("id", 99)]))
    assert second.instance.tables["t"].last_commit_us > before[3]
    second.close()


def test_a_killed_emulator_replays_its_journal(tmp_path: Path) -> None:
    clock = Clock()
    crashed = Backend(data_dir=str(tmp_path), clock_us=lambda: clock.tick())
    populate(crashed)
    with pytest.raises(ConditionCheckFail):  # failed calls change nothing and are not journaled
        crashed.call(
            "write_row", "t", RowChange(WriteKind.PUT, [("id", 1)], condition=Condition(RowExistence.EXPECT_NOT_EXIST))
        )
    before = state_of(crashed)
    # No close(): no final snapshot, the journal file is all there is (as after kill -9).
    recovered = Backend(data_dir=str(tmp_path), clock_us=lambda: clock.tick())
    assert state_of(recovered) == before
    view = recovered.call("get_row", "t", [("id", 3)], ReadOptions())
    assert {name: value for name, value, _ in view.cells} == {"v": 3, "n": 2}
    recovered.close()


def test_torn_tail_is_cut_off(tmp_path: Path) -> None:
    clock = Clock()
    backend = Backend(data_dir=str(tmp_path), clock_us=lambda: clock.tick())
    populate(backend)
    before = state_of(backend)
    assert backend.journal is not None
    backend.journal.close()
    log = next(tmp_path.glob("journal-*.log"))
    with log.open("ab") as file:
        file.write(b"\x40\x00\x00\x00\x01\x02")  # a frame header promising 64 bytes, then the crash
    recovered = Backend(data_dir=str(tmp_path), clock_us=lambda: clock.tick())
    assert state_of(recovered) == before
    recovered.call("write_row", "t", RowChange(WriteKind.PUT, [("id", 50)]))
    recovered.close()
    again = Backend(data_dir=str(tmp_path), clock_us=lambda: clock.tick())
    assert (50,) in again.instance.tables["t"].rows
    again.close()


def test_compaction_leaves_one_snapshot(tmp_path: Path) -> None:
    clock = Clock()
    backend = Backend(data_dir=str(tmp_path), clock_us=lambda: clock.tick())
    populate(backend)
    backend.close()
    assert len(list(tmp_path.glob("snapshot-*.pickle"))) == 1
    assert list(tmp_path.glob("journal-*.log")) == []


def test_unreadable_snapshot_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "snapshot-00000001.pickle").write_bytes(b"not a pickle")
    with pytest.raises(JournalError, match=r"snapshot-00000001\.pickle"):
        Journal(tmp_path).load()


def test_journaled_row_changes_from_before_return_columns_replay_with_the_default() -> None:
    import pickle

    from cdcbridge.emulator.model import RowChange, WriteKind

    change = RowChange(WriteKind.PUT, [("id", 1)])
    change.__setstate__((None, {"kind": WriteKind.PUT, "primary_key": [("id", 1)], "cells": []}))  # an older pickle
    assert change.return_columns is None and change.return_primary_key is False
    assert pickle.loads(
        pickle.dumps(RowChange(WriteKind.UPDATE, [("id", 1)], return_columns=("n",)))
    ).return_columns == ("n",)
