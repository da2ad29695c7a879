"""Which stream a configured table is read from; with source.wait_for_tables, the wait for a missing table or stream
(logged once a minute with the command that ends it), driven by a fake clock and a fake stop event."""

from __future__ import annotations

import logging

import pytest

from cdcbridge.config import TableConfig
from cdcbridge.publish.errors import BridgeStartError
from cdcbridge.publish.source_streams import table_stream_id
from cdcbridge.tablestore.errors import TableNotFoundError
from cdcbridge.tablestore.models import TableStreamDetails

TABLE = TableConfig(name="accounts")


class FakeStreams:
    """Answers DescribeTable from a script: "missing", "no stream", then a stream id (the last answer repeats)."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.calls = 0

    def describe_table_stream(self, table: str) -> TableStreamDetails:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if answer == "missing":
            raise TableNotFoundError(f"table {table} does not exist")
        if answer == "no stream":
            return TableStreamDetails(enabled=False)
        return TableStreamDetails(enabled=True, stream_id=answer)


class FakeStop:
    """A stop event whose wait advances a fake clock instead of sleeping; set after `stop_after` waits."""

    def __init__(self, clock: list[float], stop_after: int | None = None) -> None:
        self.clock = clock
        self.stop_after = stop_after
        self.waits = 0

    def wait(self, seconds: float) -> bool:
        self.waits += 1
        self.clock[0] += seconds
        return self.stop_after is not None and self.waits >= self.stop_after


def _stream_id(streams: FakeStreams, *, wait: bool, stop: FakeStop, clock: list[float]) -> str:
    return table_stream_id(streams, TABLE, "inst", wait=wait, stop=stop, clock=lambda: clock[0],  # type: ignore[arg-type]
                           poll_seconds=5.0)  # fmt: skip


def test_a_ready_table_gives_its_stream_at_once() -> None:
    clock = [0.0]
    stop = FakeStop(clock)
    assert _stream_id(FakeStreams("s-1"), wait=True, stop=stop, clock=clock) == "s-1"
    assert stop.waits == 0


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ("missing", "table accounts does not exist in Tablestore instance inst; create it (`cdcbridge table create "
                    "accounts --pk NAME:TYPE,... --stream`"),
        ("no stream", "table accounts has no stream enabled; enable it (`cdcbridge table enable-stream accounts`)"),
    ],
)  # fmt: skip
def test_without_wait_a_missing_table_or_stream_stops_the_start_with_the_command(answer: str, says: str) -> None:
    clock = [0.0]
    with pytest.raises(BridgeStartError) as error:
        _stream_id(FakeStreams(answer), wait=False, stop=FakeStop(clock), clock=clock)
    assert says in str(error.value)
    assert "source.wait_for_tables: true" in str(error.value)


def test_with_wait_the_worker_proceeds_once_table_and_stream_exist(caplog: pytest.LogCaptureFixture) -> None:
    # 30 polls of 5 s with the table missing (2.5 min), 6 more without its stream, then the stream.
    streams = FakeStreams(*(["missing"] * 30 + ["no stream"] * 6 + ["s-7"]))
    clock = [0.0]
    stop = FakeStop(clock)
    with caplog.at_level(logging.INFO, logger="cdcbridge.publish.source_streams"):
        assert _stream_id(streams, wait=True, stop=stop, clock=clock) == "s-7"
    assert stop.waits == 36
    waits = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # Logged at 0 s, 60 s, 120 s (table missing), then at 150 s when what is missing changed to the stream.
    assert len(waits) == 4
    assert all("waiting for table accounts" in line for line in waits)
    assert all("cdcbridge table create accounts" in line for line in waits[:3])
    assert "cdcbridge table enable-stream accounts" in waits[3]
    assert caplog.records[-1].getMessage() == "table accounts is ready (stream s-7); starting"


def test_a_stop_ends_the_wait() -> None:
    clock = [0.0]
    with pytest.raises(BridgeStartError, match="stopped while waiting for table accounts"):
        _stream_id(FakeStreams("missing"), wait=True, stop=FakeStop(clock, stop_after=3), clock=clock)
    assert clock[0] == 15.0
