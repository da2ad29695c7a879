"""The stream ledger keeps what a trim removes, and the trim cut respects every checkpoint (a fake stream)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.harness.chaos.ledger import StreamLedger


@dataclass
class _Shard:
    shard_id: str


def _record(shard: str, ts: int) -> ChangeRecord:
    return ChangeRecord("t", RecordAction.PUT, [("id", ts)], [Cell("v", CellOp.PUT, 1, 1)], Sequence(1, ts, 0), shard)


class FakeStreams:
    """Two shards of records with commit times in µs; an iterator is (shard, offset); trims drop old records."""

    def __init__(self, times: dict[str, list[int]]) -> None:
        self.records = {shard: [_record(shard, ts) for ts in stamps] for shard, stamps in times.items()}

    def list_all_shards(self, stream_id: str) -> list[_Shard]:
        return [_Shard(shard) for shard in self.records]

    def get_shard_iterator(self, stream_id: str, shard_id: str) -> tuple[str, int]:
        return (shard_id, 0)

    def get_stream_record(self, iterator: tuple[str, int], limit: int, **labels: Any) -> Any:
        shard, offset = iterator
        page = self.records[shard][offset : offset + limit]

        @dataclass
        class Page:
            records: list[ChangeRecord]
            next_shard_iterator: tuple[str, int]

        return Page(page, (shard, offset + len(page)))

    def trim(self, before_us: int) -> int:
        dropped = 0
        for shard, records in self.records.items():
            kept = [r for r in records if r.sequence.timestamp_us >= before_us]
            dropped += len(records) - len(kept)
            self.records[shard] = kept
        return dropped


def checkpointed_at(shard: str, ts: int) -> Lease:
    return Lease("stream", shard, checkpoint="iterator", checkpoint_seq=ExtendedSequence(Sequence(1, ts, 0)))


@dataclass
class FakeAdmin:
    """The emulator's trim, on the fake stream."""

    streams: FakeStreams

    def trim(self, table: str, before_ms: int) -> int:
        assert table == "t"
        return self.streams.trim(before_ms * 1000)


@pytest.fixture
def streams() -> FakeStreams:
    return FakeStreams({"a": [1_000, 2_000, 3_000, 9_000], "b": [1_500, 2_500, 5_000]})


def test_a_trim_cuts_below_the_oldest_unconfirmed_record_and_keeps_what_it_cut(streams: FakeStreams) -> None:
    ledger = StreamLedger(streams, "stream", "t", FakeAdmin(streams))  # type: ignore[arg-type]
    leases = {"a": checkpointed_at("a", 3_000), "b": checkpointed_at("b", 1_500)}
    result = ledger.trim_checkpointed(leases)
    assert result.before_ms == 2  # b's 2_500 µs record is not confirmed: cut at 2 ms
    assert (result.kept, result.dropped) == (2, 2)  # records before 2 ms; a's 2_000 µs record stays
    assert sorted(change.sequence for change in ledger.trimmed) == ["1:1000:0", "1:1500:0"]
    assert all(change.trimmed for change in ledger.trimmed)
    everything = ledger.all_changes()
    assert len(everything) == 7 and sum(change.trimmed for change in everything) == 2
    assert ledger.mismatched_trims == 0


def test_nothing_is_trimmed_while_a_shard_has_confirmed_nothing(streams: FakeStreams) -> None:
    ledger = StreamLedger(streams, "stream", "t", FakeAdmin(streams))  # type: ignore[arg-type]
    result = ledger.trim_checkpointed({"a": checkpointed_at("a", 9_000)})  # b has no lease yet
    assert (result.kept, result.dropped) == (0, 0)
    assert len(ledger.all_changes()) == 7
