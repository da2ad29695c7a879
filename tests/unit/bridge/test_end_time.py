"""`bridge.end_time`: when a shard has passed it (by its lease and the stream after its checkpoint), and the watch
that stops a worker once every shard of its tables has."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from cdcbridge.bridge.end_time import (
    EndTimeWatch,
    ShardEndProgress,
    end_time_progress,
    first_unconfirmed,
    has_passed,
)
from cdcbridge.changes import ChangeRecord, RecordAction, Sequence
from cdcbridge.coordination.checkpoint.positions import SHARD_END, ExtendedSequence
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.tablestore.errors import StreamError

END = 1_000_000_000
GRACE = 10_000_000


def record(ts: int, row: int = 0) -> ChangeRecord:
    return ChangeRecord("t", RecordAction.PUT, [("id", 1)], [], Sequence(1, ts, row))


@dataclass
class FakeStreams:
    """Shards as lists of records; iterators are "shard:offset"; `closed` shards end (no next iterator)."""

    shards: dict[str, list[ChangeRecord]]
    closed: set[str] = field(default_factory=set)
    page: int = 2

    def list_all_shards(self, stream_id: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(shard_id=shard) for shard in self.shards]

    def get_shard_iterator(self, stream_id: str, shard_id: str) -> str:
        return f"{shard_id}:0"

    def get_stream_record(self, iterator: str, limit: int) -> SimpleNamespace:
        shard, offset = iterator.split(":")
        records = self.shards[shard][int(offset) : int(offset) + self.page]
        end = int(offset) + len(records)
        at_end = end >= len(self.shards[shard])
        next_iterator = None if at_end and shard in self.closed else f"{shard}:{end}"
        return SimpleNamespace(records=records, next_shard_iterator=next_iterator)


def lease(shard: str, checkpoint: str = "TRIM_HORIZON", seq: Sequence | None = None) -> Lease:
    return Lease("s", shard, checkpoint=checkpoint, checkpoint_seq=ExtendedSequence(seq) if seq else None)


@pytest.mark.parametrize(
    ("finished", "next_us", "closed", "now_us", "passed"),
    [
        (True, None, False, 0, True),  # SHARD_END: every record was produced
        (False, END + 1, False, 0, True),  # the next record is after the end time
        (False, END, False, END + GRACE + 1, False),  # a record up to the end time is still unconfirmed
        (False, None, False, END + GRACE, False),  # idle, but a late record could still appear
        (False, None, False, END + GRACE + 1, True),  # idle beyond the grace period
        (False, None, True, 0, True),  # closed and read to its end
    ],
)
def test_when_a_shard_has_passed_the_end_time(finished, next_us, closed, now_us, passed) -> None:
    assert has_passed(finished=finished, next_us=next_us, closed=closed, end_us=END, now_us=now_us,
                      grace_us=GRACE) is passed  # fmt: skip


def test_the_first_unconfirmed_record_is_found_after_the_checkpoint() -> None:
    records = [record(10), record(20), record(30), record(40), record(50)]
    streams = FakeStreams({"a": records})
    assert first_unconfirmed(streams, "s", "a", None) == (10, False)
    assert first_unconfirmed(streams, "s", "a", lease("a", "a:2", records[2].sequence)) == (40, False)
    assert first_unconfirmed(streams, "s", "a", lease("a", "a:0", records[4].sequence)) == (None, False)
    streams.closed.add("a")
    assert first_unconfirmed(streams, "s", "a", lease("a", "a:4", records[4].sequence)) == (None, True)


def test_progress_covers_every_listed_shard_whoever_owns_it() -> None:
    streams = FakeStreams(
        {
            "done": [record(1)],
            "past": [record(END - 5), record(END + 5)],
            "behind": [record(END - 5), record(END - 1)],
            "idle": [record(END - 5)],
            "unleased": [record(END + 7)],
        }
    )
    leases = [
        lease("done", SHARD_END, Sequence(1, 1, 0)),
        lease("past", "past:0", Sequence(1, END - 5, 0)),  # checkpointed up to its last record before the end
        lease("behind", "behind:0", Sequence(1, END - 5, 0)),
        lease("idle", "idle:0", Sequence(1, END - 5, 0)),
    ]
    progress = end_time_progress(streams, lambda stream_id: leases, [("t", "s")], end_us=END, now_us=END + GRACE + 1,
                                 grace_us=GRACE)  # fmt: skip
    by_shard = {p.shard_id: p for p in progress}
    assert {shard: p.passed for shard, p in by_shard.items()} == {
        "done": True, "past": True, "behind": False, "idle": True, "unleased": True,
    }  # fmt: skip
    assert by_shard["behind"].next_us == END - 1 and by_shard["behind"].reached_us == END - 5
    assert by_shard["done"].describe(END) == "finished"
    assert by_shard["behind"].describe(END).endswith("0.0s to go")
    assert by_shard["past"].describe(END).startswith("passed end time (reached 1970-01-01T00:16:39.999")


class Progress:
    def __init__(self, *rounds: list[ShardEndProgress] | Exception) -> None:
        self._rounds = list(rounds)

    def __call__(self, now_us: int) -> list[ShardEndProgress]:
        answer = self._rounds.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def shard(shard_id: str, passed: bool) -> ShardEndProgress:
    return ShardEndProgress("t", shard_id, END - 1, None, False, passed)


def test_the_watch_stops_the_worker_only_once_every_shard_passed(caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    rounds = Progress([shard("a", True), shard("b", False)], StreamError("service busy"),
                      [shard("a", True), shard("b", True)])  # fmt: skip
    watch = EndTimeWatch(rounds, end_us=END, interval_seconds=1, stop=stop, now_us=lambda: END)
    with caplog.at_level("INFO", logger="cdcbridge.bridge.end_time"):
        assert not watch.check_once() and not stop.is_set()
        assert not watch.check_once() and not stop.is_set()  # a failed check just waits for the next
        assert watch.check_once() and stop.is_set() and watch.reached_end.is_set()
    messages = [r.getMessage() for r in caplog.records]
    assert "1/2 shards passed; waiting for t/b" in messages[0]
    assert "end time check failed" in messages[1]
    assert messages[2].startswith("every shard (2) passed the end time")


def test_the_watch_never_stops_on_an_empty_listing() -> None:
    stop = threading.Event()
    watch = EndTimeWatch(Progress([]), end_us=END, interval_seconds=1, stop=stop, now_us=lambda: END)
    assert not watch.check_once() and not stop.is_set()
