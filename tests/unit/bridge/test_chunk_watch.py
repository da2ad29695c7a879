"""One shard owner's rules for an open chunk: dirty keys in the window, passing the fence, the report after the
acknowledgements, and the hold of in-range records after the fence (with everything behind them)."""

from __future__ import annotations

import logging

import pytest

from cdcbridge.bridge.acks import ConfirmedPosition
from cdcbridge.bridge.chunk_watch import ShardChunkWatch
from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.snapshot.fences import FenceView
from cdcbridge.snapshot.incremental_state import IncrementalChunk

W, F = 1_000, 2_000  # µs
MARGIN = 100


def rec(key: int, commit_us: int, epoch: int = 0) -> ChangeRecord:
    return ChangeRecord("orders", RecordAction.PUT, [("id", key)], [Cell("v", CellOp.PUT, key)],
                        Sequence(epoch, commit_us, 0), "shard-a")  # fmt: skip


def chunk(fence: int | None = F, *, begin: int = 10, end: int | None = 20, number: int = 1, snapshot: str = "s1"):
    return IncrementalChunk("stream", snapshot, number, W, fence, begin=[("id", begin)],
                            end=None if end is None else [("id", end)])  # fmt: skip


def view(*chunks: IncrementalChunk) -> FenceView:
    return FenceView(tuple(chunks), 0.0)


def acked_through(record: ChangeRecord) -> ConfirmedPosition:
    return ConfirmedPosition(record.sequence, None)


def test_keys_of_the_chunk_changed_in_the_window_are_dirty_and_reported_after_the_pass_is_acknowledged() -> None:
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    records = [rec(12, 900), rec(13, 1_000, epoch=3), rec(5, 1_500), rec(19, 2_000, epoch=4), rec(30, 2_100)]
    assert watch.admit(records, view(chunk())) == 5, "nothing of the chunk's range after the fence: nothing held"
    assert watch.reports_due(acked_through(records[2]), 7) == [], "19 (at F) is not acknowledged yet"
    (report,) = watch.reports_due(acked_through(records[3]), 7)
    assert (report.snapshot_id, report.chunk, report.shard_id, report.passed) == ("s1", 1, "shard-a", True)
    assert report.dirty_keys == ([("id", 13)], [("id", 19)]), "12 changed before W, 5 and 30 are outside"
    assert (report.epochs, report.newest_epoch, report.reported_ms, report.holding) == ((3, 4), 0, 7, False)
    watch.reported(report)
    assert watch.reports_due(acked_through(records[4]), 8) == [], "sent once"


def test_an_in_range_record_after_the_fence_is_held_with_everything_after_it_until_the_chunk_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="cdcbridge.bridge.chunk_watch")
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    records = [rec(11, 1_500), rec(3, 2_500), rec(15, 2_600), rec(4, 2_700)]
    assert watch.admit(records, view(chunk())) == 2, "3 is outside the range; 15 after F is held, and 4 behind it"
    assert watch.holding is not None and "chunk 1 of incremental snapshot s1" in watch.holding
    (report,) = watch.reports_due(acked_through(records[1]), 1)
    assert report.dirty_keys == ([("id", 11)],), "the shard passed F (at record 3) while it holds 15"
    assert report.holding
    assert watch.admit(records[2:], view(chunk())) == 0, "still open: still held"
    assert watch.admit(records[2:], view()) == 2, "emitted (no longer open): released in order"
    assert watch.holding is None
    messages = [r.getMessage() for r in caplog.records]
    assert any("shard shard-a of table orders holds its records until chunk 1" in m for m in messages)
    assert any("no longer holds" in m for m in messages)


def test_an_announced_chunk_only_marks_dirty_keys() -> None:
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    records = [rec(11, 1_500), rec(15, 9_000), rec(99, 9_999)]
    announced = chunk(fence=None, end=None)
    assert watch.admit(records, view(announced)) == 3, "no fence yet: nothing held, nothing passed"
    assert watch.reports_due(acked_through(records[-1]), 1) == []
    fenced = chunk(fence=F, end=20)
    watch.idle(view(fenced), F + MARGIN + 1)
    (report,) = watch.reports_due(acked_through(records[-1]), 2)
    assert report.dirty_keys == ([("id", 11)], [("id", 15)]), "99 was dirty under the announced range, not the read"


def test_an_idle_shard_passes_the_fence_once_its_clock_is_past_it_by_the_margin() -> None:
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    first = rec(12, 1_200)
    watch.admit([first], view(chunk()))
    watch.idle(view(chunk()), F + MARGIN)
    assert watch.reports_due(acked_through(first), 1) == [], "not later than F + m yet"
    watch.idle(view(chunk()), F + MARGIN + 1)
    assert watch.reports_due(None, 1) == [], "record 12 is not acknowledged yet"
    (report,) = watch.reports_due(acked_through(first), 1)
    assert report.dirty_keys == ([("id", 12)],)


def test_a_shard_that_saw_nothing_reports_at_once_when_it_passes() -> None:
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    watch.idle(view(chunk()), F + MARGIN + 1)
    (report,) = watch.reports_due(None, 1)
    assert (report.dirty_keys, report.epochs, report.newest_epoch) == ((), (), None)


def test_a_partly_acknowledged_pass_point_is_not_enough() -> None:
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    records = [rec(12, 1_200), rec(30, 2_500)]
    watch.admit(records, view(chunk()))
    assert watch.reports_due(ConfirmedPosition(records[0].sequence, 0), 1) == []
    assert len(watch.reports_due(ConfirmedPosition(records[0].sequence, None), 1)) == 1


def test_without_a_view_everything_is_held_and_a_closed_or_dead_chunk_is_forgotten() -> None:
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    records = [rec(1, 100), rec(2, 200)]
    assert watch.admit(records, None) == 0 and watch.holding is not None
    assert watch.admit(records, view()) == 2 and watch.holding is None
    watch.admit([rec(12, 1_500)], view(chunk()))
    watch.admit([], view())  # the chunk closed before this shard passed it
    watch.idle(view(), F + MARGIN + 1)
    assert watch.reports_due(None, 1) == [], "nothing to report on a chunk that is no longer open"


def test_a_record_held_by_one_chunk_still_passes_another_and_a_redone_chunk_starts_afresh() -> None:
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    first = chunk(begin=10, end=20, snapshot="a")
    later = IncrementalChunk("stream", "b", 1, W, 2_400, begin=[("id", 100)], end=[("id", 200)])
    records = [rec(150, 1_500), rec(15, 2_500)]
    assert watch.admit(records, view(first, later)) == 1, "15 is held by chunk a"
    due = {r.snapshot_id: r for r in watch.reports_due(acked_through(records[0]), 1)}
    assert set(due) == {"a", "b"}, "record 15 is after both fences: both passed"
    assert due["b"].dirty_keys == ([("id", 150)],)
    redo = chunk(begin=10, end=20, snapshot="a", number=2)
    watch.admit([], view(redo))
    assert watch.reports_due(acked_through(records[0]), 2) == [], "chunk 2 is not passed yet"


def test_a_hold_that_starts_after_the_report_is_reported_again() -> None:
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    first = rec(30, 2_500)
    watch.admit([first], view(chunk()))
    (report,) = watch.reports_due(acked_through(first), 1)
    watch.reported(report)
    assert not report.holding
    assert watch.admit([rec(15, 2_600)], view(chunk())) == 0
    (again,) = watch.reports_due(acked_through(first), 2)
    assert again.holding and again.reported_ms == 2


def test_the_checkpoint_stays_before_the_first_dirty_record_until_the_first_report_is_stored() -> None:
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    assert watch.checkpoint_cap() == (False, None)
    records = [rec(3, 1_100), rec(12, 1_200), rec(13, 1_300), rec(30, 2_500)]
    watch.admit(records, view(chunk()))
    assert watch.checkpoint_cap() == (True, records[0].sequence), "12 made a key dirty: stay at 3"
    (report,) = watch.reports_due(acked_through(records[3]), 1)
    watch.reported(report)
    assert watch.checkpoint_cap() == (False, None)
    watch.admit([rec(14, 1_900)], view(chunk()))
    assert watch.checkpoint_cap() == (False, None), "lifted for good once a report is stored"

    fresh = ShardChunkWatch("orders", "shard-a", MARGIN)
    fresh.admit([rec(12, 1_200)], view(chunk()))
    assert fresh.checkpoint_cap() == (True, None), "the first record of this incarnation: no checkpoint at all"
    fresh.admit([], view())
    assert fresh.checkpoint_cap() == (False, None), "the chunk closed"


def test_at_the_shard_end_every_open_chunk_is_passed() -> None:
    watch = ShardChunkWatch("orders", "shard-a", MARGIN)
    first = rec(12, 1_200)
    watch.admit([first], view(chunk(fence=None)))
    assert watch.reports_due(acked_through(first), 1) == [] and watch.unreported() == 0
    watch.shard_ended()
    assert watch.unreported() == 1
    (report,) = watch.reports_due(acked_through(first), 1)
    assert report.passed and report.dirty_keys == ([("id", 12)],)
    watch.reported(report)
    assert watch.unreported() == 0
