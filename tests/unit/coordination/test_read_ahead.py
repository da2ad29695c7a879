"""Reading ahead changes no outcome: the page read ahead is handed out only for its own cursor, with its own
error, and a read is never made twice."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from cdcbridge.changes import ChangeRecord, RecordAction, Sequence
from cdcbridge.coordination.errors import TrimmedDataError
from cdcbridge.coordination.stream.access import RecordBatch
from cdcbridge.coordination.stream.read_ahead import PageReader


def record(i: int) -> ChangeRecord:
    return ChangeRecord("t", RecordAction.PUT, [("id", i)], [], Sequence(1, i, 0), "s")


class Stream:
    """Cursor "c<n>" holds record n and leads to "c<n+1>"; "end" pages close the shard; reads are logged."""

    def __init__(self, empty: set[str] = frozenset(), fail: dict[str, Exception] | None = None) -> None:
        self.reads: list[str] = []
        self.empty, self.fail = empty, fail or {}
        self.gate = threading.Event()
        self.gate.set()

    def get_records(self, cursor: str, limit: int) -> RecordBatch:
        self.gate.wait(5)
        self.reads.append(cursor)
        if cursor in self.fail:
            raise self.fail[cursor]
        n = int(cursor[1:])
        if cursor in self.empty:
            return RecordBatch([], cursor)
        return RecordBatch([record(n)], None if n >= 3 else f"c{n + 1}")


@pytest.fixture
def pool():
    with ThreadPoolExecutor(2) as executor:
        yield executor


def test_the_next_page_is_read_while_this_one_is_processed(pool: ThreadPoolExecutor) -> None:
    stream = Stream()
    reader = PageReader(stream, pool)
    assert reader.read("c0", 10).records == [record(0)]
    assert reader.reading_ahead
    assert reader.read("c1", 10).records == [record(1)]
    assert reader.read("c2", 10).records == [record(2)]
    last = reader.read("c3", 10)
    assert last.next_iterator is None and not reader.reading_ahead  # a closed shard has nothing after its end
    assert stream.reads == ["c0", "c1", "c2", "c3"]  # each page read once


def test_a_page_read_ahead_for_another_cursor_is_dropped(pool: ThreadPoolExecutor) -> None:
    stream = Stream()
    reader = PageReader(stream, pool)
    reader.read("c0", 10)  # reads c1 ahead
    assert reader.read("c0", 10).records == [record(0)]  # e.g. a restart from the checkpoint: read afresh
    assert reader.read("c1", 10).records == [record(1)]
    assert reader.read("c1", 5).records == [record(1)]  # another limit is another read
    assert stream.reads.count("c0") == 2 and stream.reads.count("c1") >= 2


def test_the_error_of_a_read_ahead_is_raised_when_its_page_is_asked_for(pool: ThreadPoolExecutor) -> None:
    stream = Stream(fail={"c1": TrimmedDataError("records before c1 were trimmed")})
    reader = PageReader(stream, pool)
    reader.read("c0", 10)
    with pytest.raises(TrimmedDataError, match="trimmed"):
        reader.read("c1", 10)
    assert not reader.reading_ahead


def test_an_idle_shard_is_not_read_ahead(pool: ThreadPoolExecutor) -> None:
    stream = Stream(empty={"c1"})
    reader = PageReader(stream, pool)
    reader.read("c0", 10)
    assert reader.read("c1", 10).records == []
    assert not reader.reading_ahead  # the next read waits for the idle interval instead


def test_without_an_executor_each_page_is_read_when_asked() -> None:
    stream = Stream()
    reader = PageReader(stream, None)
    reader.read("c0", 10)
    assert not reader.reading_ahead and stream.reads == ["c0"]


def test_asking_for_a_page_still_being_read_waits_for_it(pool: ThreadPoolExecutor) -> None:
    stream = Stream()
    reader = PageReader(stream, pool)
    reader.read("c0", 10)
    stream.gate.clear()  # the read ahead of c1 may be stuck on the network …
    done = threading.Event()
    result: list[RecordBatch] = []
    threading.Thread(target=lambda: (result.append(reader.read("c1", 10)), done.set())).start()
    stream.gate.set()  # … until the answer comes
    assert done.wait(5) and result[0].records == [record(1)]
