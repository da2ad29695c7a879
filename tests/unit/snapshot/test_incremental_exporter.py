"""The incremental exporter's chunk loop against the fake status table, a fake sink and fake shard owners: the
window is announced before the read and fenced after it, dirty keys are left out and re-read, hot keys are skipped,
the PUTs carry the owners' epoch and the read's end time, pause / cancel / takeover are obeyed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from cdcbridge.changes import Sequence
from cdcbridge.snapshot.errors import SnapshotError
from cdcbridge.snapshot.incremental import (
    ExporterSettings,
    IncrementalExporter,
    StreamShards,
    choose_epoch,
)
from cdcbridge.snapshot.incremental_runner import pick_snapshot
from cdcbridge.snapshot.incremental_state import (
    ChunkState,
    ExporterReplacedError,
    IncrementalChunk,
    IncrementalReport,
    IncrementalSnapshot,
    IncrementalSnapshotStore,
    IncrementalState,
)
from cdcbridge.snapshot.report_quorum import ShardNode

from .fakes import SOURCE, STATUS, STREAM, FakeSink, publisher, source_with_rows

SETTINGS = ExporterSettings(
    chunk_rows=4, clock_skew_margin_seconds=0.01, fence_refresh_seconds=0.02, exporter_timeout_seconds=5.0,
    max_key_retries=2, heartbeat_seconds=0.05, delivery_seconds=1.0, write_allowance_seconds=0.2,
)  # fmt: skip
ONE_SHARD = StreamShards({"s1": ShardNode("s1", (), False, "worker-1")})

#: (chunk, shard) → the dirty keys (as id values) the fake owner reports; None: the shard does not report.
DirtyRule = Callable[[IncrementalChunk, str], list[int] | None]


class FakeOwners(IncrementalSnapshotStore):
    """The status store, with shard owners that report on a chunk as soon as it is fenced (and record what the
    exporter wrote, in order)."""

    def __init__(self, client, shards: list[str], dirty: DirtyRule, epoch: int = 7) -> None:
        super().__init__(client, STATUS)
        self.shards, self.dirty, self.epoch = shards, dirty, epoch
        self.opened: list[IncrementalChunk] = []

    def open_chunk(self, snapshot: IncrementalSnapshot, chunk: IncrementalChunk) -> None:
        super().open_chunk(snapshot, chunk)
        self.opened.append(chunk)

    def set_fence(self, chunk: IncrementalChunk, fence_us: int, end=None) -> IncrementalChunk:
        chunk = super().set_fence(chunk, fence_us, end)
        self.opened.append(chunk)
        for shard in self.shards:
            keys = self.dirty(chunk, shard)
            if keys is not None:
                self.write_report(IncrementalReport(
                    STREAM, chunk.snapshot_id, chunk.number, shard, True, tuple([("id", k)] for k in keys),
                    (self.epoch,), self.epoch,
                ))  # fmt: skip
        return chunk


def clean(chunk: IncrementalChunk, shard: str) -> list[int]:
    return []


def claimed(store: IncrementalSnapshotStore, **request) -> IncrementalSnapshot:
    snapshot = store.request(STREAM, SOURCE, now_ms=int(time.time() * 1000), **request)
    return store.claim(snapshot, "exporter-1", int(time.time() * 1000))


def exporter(store, sink, shards=lambda: ONE_SHARD, settings=SETTINGS, stop=None) -> IncrementalExporter:
    return IncrementalExporter(ots=store._client, store=store, shards=shards, publisher=publisher(sink),
                               settings=settings, stop=stop)  # fmt: skip


def ids(sink: FakeSink) -> list[int]:
    return [value["pk"][0]["value"][1] for value in sink.values(".image")]


def test_every_row_is_emitted_once_with_the_owners_epoch_after_the_chunk_was_announced_before_the_read() -> None:
    client = source_with_rows(10)
    store, sink = FakeOwners(client, ["s1"], clean), FakeSink()
    before = int(time.time() * 1_000_000)
    result = exporter(store, sink).run(claimed(store))
    assert result.state is IncrementalState.DONE and (result.rows, result.chunks) == (10, 3)
    assert ids(sink) == list(range(10)) and len(sink.values(".mutation")) == 10
    stored = store.read(STREAM, result.snapshot_id)
    assert stored.state is IncrementalState.DONE and stored.range_done and stored.rows == 10
    # Each chunk is written twice: announced (window in the future, no fence), then fenced after the read.
    announced, fenced = store.opened[0::2], store.opened[1::2]
    assert [c.number for c in announced] == [c.number for c in fenced] == [1, 2, 3]
    margin_us = SETTINGS.clock_skew_margin_seconds * 1e6
    assert all(c.fence_us is None and c.window_start_us >= before - margin_us for c in announced)
    pairs = zip(announced, fenced, strict=True)
    assert all(f.window_start_us == a.window_start_us < f.fence_us for a, f in pairs)
    assert fenced[0].end == [("id", 4)] and fenced[1].begin == [("id", 4)]
    seqs = [Sequence(v["seq"]["epoch"], v["seq"]["timestamp_us"], v["seq"]["row_index"]) for v in sink.values(".image")]
    assert {s.epoch for s in seqs} == {7} and all(s.row_index == 0 for s in seqs)
    wait_us = (SETTINGS.fence_refresh_seconds + 2 * SETTINGS.clock_skew_margin_seconds) * 1e6
    for chunk, first in zip(fenced, (0, 4, 8), strict=True):
        t1 = seqs[first].timestamp_us
        # read R + 2m after the announcement at the earliest; its end t1 is inside the window, m before the fence
        assert chunk.opened_ms * 1000 + wait_us <= t1 <= chunk.fence_us - margin_us
    final = store.read_chunk(STREAM, result.snapshot_id)
    assert final.state is ChunkState.EMITTED and not store.read_reports(STREAM, result.snapshot_id, final.number)
    assert sink.values(".image")[0]["source"]["shard_id"] == "snapshot"


def test_dirty_keys_are_left_out_and_emitted_by_a_later_key_list_chunk() -> None:
    client = source_with_rows(8)
    dirty_once = {2, 5}

    def rule(chunk: IncrementalChunk, shard: str) -> list[int]:
        if chunk.keys is not None:
            return []  # quiet by the time they are re-read
        return [k for k in sorted(dirty_once) if chunk.covers([("id", k)])]

    store, sink = FakeOwners(client, ["s1"], rule), FakeSink()
    result = exporter(store, sink).run(claimed(store))
    assert result.state is IncrementalState.DONE and result.rows == 8 and not result.skipped_keys
    emitted = ids(sink)
    assert sorted(emitted) == list(range(8)) and len(emitted) == 8
    assert emitted.index(2) > emitted.index(3)  # re-read after its chunk
    key_chunks = [c for c in store.opened[1::2] if c.keys is not None]
    assert [list(c.keys) for c in key_chunks] == [[[("id", 2)]], [[("id", 5)]]]


def test_a_key_dirty_in_every_re_read_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    client = source_with_rows(6)

    def rule(chunk: IncrementalChunk, shard: str) -> list[int]:
        return [3] if chunk.covers([("id", 3)]) else []

    store, sink = FakeOwners(client, ["s1"], rule), FakeSink()
    with caplog.at_level(logging.WARNING):
        result = exporter(store, sink).run(claimed(store))
    assert result.state is IncrementalState.DONE and result.rows == 5
    assert 3 not in ids(sink)
    assert result.skipped_keys == ([("id", 3)],)
    assert store.read(STREAM, result.snapshot_id).skipped_keys == ([("id", 3)],)
    key_chunks = [c for c in store.opened[1::2] if c.keys is not None]
    assert len(key_chunks) == SETTINGS.max_key_retries + 1  # the re-reads, the last of which gives up
    assert "key (3) changed during each of its 2 re-reads" in caplog.text and "hot key" in caplog.text


def test_deleted_rows_of_a_key_list_are_not_emitted_and_leave_the_list() -> None:
    client = source_with_rows(4)

    def rule(chunk: IncrementalChunk, shard: str) -> list[int]:
        if chunk.keys is None:
            del client.tables[SOURCE][(1,)]  # deleted during the window
            return [1]
        return []

    store, sink = FakeOwners(client, ["s1"], rule), FakeSink()
    result = exporter(store, sink).run(claimed(store))
    assert result.state is IncrementalState.DONE and ids(sink) == [0, 2, 3] and not result.skipped_keys


def test_the_chunk_waits_for_every_shard_that_needs_a_report_and_unions_their_dirty_keys() -> None:
    client = source_with_rows(4)
    # parent finished → both children need a report; a grandchild of an unfinished child is covered by it.
    nodes = {
        "p": ShardNode("p", (), True), "c1": ShardNode("c1", ("p",), False, "w1"),
        "c2": ShardNode("c2", ("p",), False, ""), "g": ShardNode("g", ("c1",), False, "w1"),
    }  # fmt: skip
    late = threading.Event()

    def rule(chunk: IncrementalChunk, shard: str) -> list[int] | None:
        if chunk.keys is not None:
            return []
        return {"c1": [0]}.get(shard, [] if late.is_set() else None)

    store, sink = FakeOwners(client, ["c1", "c2"], rule), FakeSink()
    snapshot = claimed(store)
    worker = exporter(store, sink, shards=lambda: StreamShards(nodes))
    thread = threading.Thread(target=lambda: setattr(worker, "result", worker.run(snapshot)))
    thread.start()
    time.sleep(0.8)
    assert sink.messages == []  # c2 (no owner) has not reported
    chunk = store.read_chunk(STREAM, snapshot.snapshot_id)
    store.write_report(
        IncrementalReport(STREAM, snapshot.snapshot_id, chunk.number, "c2", True, ([("id", 2)],), (7,), 7)
    )
    late.set()
    thread.join(10)
    assert worker.result.state is IncrementalState.DONE
    assert ids(sink)[:2] == [1, 3] and sorted(ids(sink)) == [0, 1, 2, 3]  # 0 and 2 came back as key-list chunks


def test_cancel_while_waiting_abandons_the_open_chunk_and_produces_nothing() -> None:
    client = source_with_rows(4)
    store, sink = FakeOwners(client, ["s1"], lambda chunk, shard: None), FakeSink()  # nobody reports
    snapshot = claimed(store)
    worker = exporter(store, sink)
    thread = threading.Thread(target=lambda: setattr(worker, "result", worker.run(snapshot)))
    thread.start()
    time.sleep(0.5)
    store.set_state(
        STREAM, snapshot.snapshot_id, IncrementalState.CANCELLED, now_ms=1, expected=IncrementalState.RUNNING
    )
    thread.join(10)
    assert worker.result.state is IncrementalState.CANCELLED and sink.messages == []
    assert store.read_chunk(STREAM, snapshot.snapshot_id).state is ChunkState.ABANDONED


def test_a_paused_snapshot_abandons_its_chunk_waits_and_goes_on_when_resumed() -> None:
    client = source_with_rows(4)
    reporting = threading.Event()
    store = FakeOwners(client, ["s1"], lambda chunk, shard: [] if reporting.is_set() else None)
    sink = FakeSink()
    snapshot = claimed(store)
    worker = exporter(store, sink)
    thread = threading.Thread(target=lambda: setattr(worker, "result", worker.run(snapshot)))
    thread.start()
    time.sleep(0.5)
    store.set_state(STREAM, snapshot.snapshot_id, IncrementalState.PAUSED, now_ms=1)
    time.sleep(0.8)
    assert store.read_chunk(STREAM, snapshot.snapshot_id).state is ChunkState.ABANDONED
    opened = len(store.opened)
    time.sleep(0.5)
    assert len(store.opened) == opened  # no new chunk while paused
    reporting.set()
    store.set_state(STREAM, snapshot.snapshot_id, IncrementalState.RUNNING, now_ms=2)
    thread.join(10)
    assert worker.result.state is IncrementalState.DONE and ids(sink) == [0, 1, 2, 3]


def test_a_taken_over_snapshot_abandons_the_dead_exporters_chunk_and_resumes_from_its_progress() -> None:
    client = source_with_rows(8)
    store, sink = FakeOwners(client, ["s1"], clean), FakeSink()
    dead = claimed(store)
    dead = store.save_progress(dead, now_ms=1, resume=[("id", 4)], range_done=False, rows=4, chunks=1)
    left = IncrementalChunk(STREAM, dead.snapshot_id, 3, 1, 2, ChunkState.OPEN, [("id", 4)], None)
    IncrementalSnapshotStore.open_chunk(store, dead, left)
    stale = store.read(STREAM, dead.snapshot_id)
    stale = IncrementalSnapshot(**{**stale.__dict__, "heartbeat_ms": 1})
    store.heartbeat(stale, 1)  # the old exporter's last heartbeat, long ago
    chosen = pick_snapshot(store.list_snapshots(STREAM), now_ms=int(time.time() * 1000), timeout_ms=5000,
                           begin=None, end=None)  # fmt: skip
    assert chosen.snapshot_id == dead.snapshot_id
    taken = store.claim(chosen, "exporter-2", int(time.time() * 1000))
    result = exporter(store, sink).run(taken)
    assert result.state is IncrementalState.DONE and result.rows == 8 and ids(sink) == [4, 5, 6, 7]
    assert store.opened[0].number == 4  # after the abandoned chunk 3


def test_an_exporter_replaced_by_another_stops_before_producing() -> None:
    client = source_with_rows(4)
    store = FakeOwners(client, ["s1"], lambda chunk, shard: None)
    sink = FakeSink()
    snapshot = claimed(store)
    worker = exporter(store, sink)
    thread = threading.Thread(target=lambda: setattr(worker, "error", _run_catching(worker, snapshot)))
    thread.start()
    time.sleep(0.4)
    current = store.read(STREAM, snapshot.snapshot_id)
    store.claim(current, "exporter-2", int(time.time() * 1000))
    thread.join(10)
    assert isinstance(worker.error, ExporterReplacedError) and sink.messages == []


def _run_catching(worker: IncrementalExporter, snapshot: IncrementalSnapshot) -> BaseException | None:
    try:
        worker.run(snapshot)
    except BaseException as error:
        return error
    return None


def test_a_snapshot_with_a_live_exporter_is_refused_and_a_pending_one_is_picked_up() -> None:
    live = IncrementalSnapshot(STREAM, "a", SOURCE, IncrementalState.RUNNING, exporter_id="x", heartbeat_ms=10_000)
    pending = IncrementalSnapshot(STREAM, "b", SOURCE, IncrementalState.PENDING)
    with pytest.raises(SnapshotError, match="runs under exporter x"):
        pick_snapshot([live], now_ms=12_000, timeout_ms=5_000, begin=None, end=None)
    assert pick_snapshot([live], now_ms=16_000, timeout_ms=5_000, begin=None, end=None) == live  # dead: taken over
    assert pick_snapshot([pending], now_ms=0, timeout_ms=5_000, begin=None, end=None) == pending
    other_range = [("id", 5)]
    assert pick_snapshot([pending], now_ms=0, timeout_ms=5_000, begin=other_range, end=None) is None
    done = IncrementalSnapshot(STREAM, "c", SOURCE, IncrementalState.DONE)
    assert pick_snapshot([done], now_ms=0, timeout_ms=5_000, begin=None, end=None) is None
    with pytest.raises(SnapshotError, match="is DONE"):
        pick_snapshot([done], now_ms=0, timeout_ms=5_000, begin=None, end=None, snapshot_id="c")


def test_the_epoch_is_the_newest_reported_else_the_newest_checkpoints_else_0() -> None:
    def report(*epochs: int, newest: int | None = None) -> IncrementalReport:
        return IncrementalReport(STREAM, "s", 1, "x", True, (), epochs, newest)

    assert choose_epoch([report(3), report(3, newest=3)], None) == 3
    assert choose_epoch([report(3), report(newest=4)], 9) == 4  # they disagree: the newest
    assert choose_epoch([report()], 5) == 5
    assert choose_epoch([], None) == 0


def test_a_refused_message_abandons_the_chunk_once_every_message_settled_and_frees_the_snapshot() -> None:
    client = source_with_rows(4)
    store, sink = FakeOwners(client, ["s1"], clean), FakeSink(fail_when=lambda index: index == 1)
    snapshot = claimed(store)
    with pytest.raises(SnapshotError, match="refused by the broker"):
        exporter(store, sink).run(snapshot)
    stored = store.read(STREAM, snapshot.snapshot_id)
    assert store.read_chunk(STREAM, snapshot.snapshot_id).state is ChunkState.ABANDONED
    assert stored.state is IncrementalState.RUNNING and stored.rows == 0
    assert stored.heartbeat_ms == 0  # released: the next run takes it over at once
    assert pick_snapshot([stored], now_ms=int(time.time() * 1000), timeout_ms=5_000, begin=None, end=None) == stored


def test_a_chunk_whose_messages_may_still_reach_kafka_stays_open_and_keeps_its_exporters_heartbeat() -> None:
    client = source_with_rows(4)
    store, sink = FakeOwners(client, ["s1"], clean), FakeSink(ack_when=lambda index: False)
    snapshot = claimed(store)
    settings = ExporterSettings(**{**SETTINGS.__dict__, "delivery_seconds": 0.2})
    with pytest.raises(SnapshotError, match="8 unsettled"):
        exporter(store, sink, settings=settings).run(snapshot)
    # The workers keep holding its newer records until the heartbeat is judged dead, after the producer gave up.
    assert store.read_chunk(STREAM, snapshot.snapshot_id).state is ChunkState.OPEN
    assert store.read(STREAM, snapshot.snapshot_id).heartbeat_ms > 0
