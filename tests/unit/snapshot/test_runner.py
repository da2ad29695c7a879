"""`cdcbridge snapshot` for one table, over fakes: the stream start stored before the export, DONE at the end, a
resumed run that exports only what is left, a refusal while workers run, and a stop that leaves it resumable."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace

import pytest
from tablestore import Row

from cdcbridge.config import parse_config
from cdcbridge.publish.tables import TableRuntime
from cdcbridge.snapshot import runner
from cdcbridge.snapshot.errors import SnapshotError, SnapshotRefusedError
from cdcbridge.snapshot.split_points import ranges_from_points
from cdcbridge.snapshot.state import SnapshotState, SnapshotStateStore

from .fakes import SOURCE, STATUS, STREAM, FakeSink, source_with_rows

NOW = 1_700_000_000.0
CONFIG = parse_config(
    {
        "source": {"tables": [{"name": SOURCE, "formats": ["RECORD_IMAGE", "MUTATE_LOG"]}]},
        "coordination": {"status_table": STATUS},
        "snapshot": {"clock_skew_margin_seconds": 5, "parallelism": 2},
    },
    environ={},
)


@pytest.fixture(autouse=True)
def two_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """The source splits the table at id 5."""
    monkeypatch.setattr(runner, "key_ranges", lambda ots, table, size: ranges_from_points(["id"], [[("id", 5)]]))


def table_snapshot(
    client, sink: FakeSink, stop: threading.Event | None = None, progress_file: io.StringIO | None = None
) -> runner.TableSnapshot:
    table = CONFIG.source.tables[0]
    runtime = TableRuntime(table, STREAM, table.topics(prefix="cdc", table=SOURCE))
    serializers = SimpleNamespace(serialize=lambda topic, value: value, schema_ids={})  # the builders' dicts
    return runner.TableSnapshot(CONFIG, client, runtime, serializers, sink, stop or threading.Event(),
                                progress_file or io.StringIO(), clock=lambda: NOW)  # fmt: skip


def test_a_snapshot_stores_its_start_first_exports_every_range_and_ends_done() -> None:
    client, sink = source_with_rows(10), FakeSink()
    result = table_snapshot(client, sink).run()
    assert (result.rows, result.ranges, result.resumed, result.already_done) == (10, 2, False, False)
    assert result.start_us == int((NOW - 5) * 1_000_000)
    record = SnapshotStateStore(client, STATUS).read(STREAM, SOURCE)
    assert record.state is SnapshotState.DONE and record.start_us == result.start_us and record.rows == 10
    assert sorted(sink.keys(".mutation")) == sorted(f"[{i}]".encode() for i in range(10))
    first_write = next(i for i, (api, _) in enumerate(client.requests) if api in ("PutRow", "UpdateRow"))
    first_read = next(i for i, (api, _) in enumerate(client.requests) if api == "GetRange" and
                      client.requests[i][1].table_name == SOURCE)  # fmt: skip
    assert first_write < first_read  # T0 is stored before a single row is read

    again = table_snapshot(client, FakeSink()).run()
    assert again.already_done and again.rows == 10
    assert "already done" in again.line()


def test_an_interrupted_snapshot_resumes_with_its_start_and_exports_only_what_is_left() -> None:
    client = source_with_rows(10)
    store = SnapshotStateStore(client, STATUS)
    store.create(STREAM, SOURCE, 123_456_789, 1)
    ranges = store.store_ranges(STREAM, SOURCE, ranges_from_points(["id"], [[("id", 5)]]))
    store.save_progress(STREAM, ranges[0].advanced(None, 5))  # range 0 finished before the crash
    sink = FakeSink()
    result = table_snapshot(client, sink).run()
    assert result.resumed and result.start_us == 123_456_789 and result.rows == 10
    assert sink.keys(".mutation") == [f"[{i}]".encode() for i in range(5, 10)]
    assert "resumed and finished" in result.line()


def test_a_snapshot_is_refused_while_a_worker_holds_a_live_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    client = source_with_rows(10)
    lease_key = [("StreamId", STREAM), ("StatusType", "LeaseKey"), ("StatusValue", "shard-1")]
    client.put_row(STATUS, Row(lease_key, [("LeaseOwner", "worker-7"), ("LeaseCounter", 3),
                                           ("Checkpoint", "TRIM_HORIZON")]))  # fmt: skip
    monkeypatch.setattr(runner, "lease_renew_times", lambda ots, table, stream: {"shard-1": int(NOW * 1000) - 500})
    with pytest.raises(SnapshotRefusedError, match="workers worker-7 are running for table orders"):
        table_snapshot(client, FakeSink()).run()
    assert SnapshotStateStore(client, STATUS).read(STREAM, SOURCE) is None  # nothing left that workers wait for

    monkeypatch.setattr(runner, "lease_renew_times", lambda ots, table, stream: {"shard-1": int(NOW * 1000) - 60_000})
    assert table_snapshot(client, FakeSink()).run().rows == 10  # a lease not renewed for a lease period is dead


def test_a_stopped_snapshot_keeps_its_start_and_progress_for_the_next_run() -> None:
    client = source_with_rows(10)
    stop = threading.Event()
    stop.set()
    with pytest.raises(SnapshotError, match="run `cdcbridge snapshot` again to resume"):
        table_snapshot(client, FakeSink(), stop).run()
    record = SnapshotStateStore(client, STATUS).read(STREAM, SOURCE)
    assert record.state is SnapshotState.RUNNING and record.ranges == 2
    assert table_snapshot(client, FakeSink()).run().resumed


def test_live_lease_owners_ignores_released_finished_and_expired_leases() -> None:
    from cdcbridge.coordination.leases.lease import Lease

    leases = [
        Lease("s", "a", owner="w1"),
        Lease("s", "b", owner=""),
        Lease("s", "c", owner="w2", checkpoint="SHARD_END"),
        Lease("s", "d", owner="w3"),
    ]
    renewed = {"a": 9_000, "b": 9_900, "c": 9_900, "d": 1_000}
    assert runner.live_lease_owners(leases, renewed, now_ms=10_000, lease_ms=2_000) == ["w1"]


def test_no_progress_bar_is_drawn_when_the_output_is_not_a_terminal() -> None:
    output = io.StringIO()
    table_snapshot(source_with_rows(10), FakeSink(), progress_file=output).run()
    assert output.getvalue() == ""
