"""The commit cursor (§5.4): what may be checkpointed, what is stored, stale owners (T3), async checkpoints."""

from __future__ import annotations

import threading

import pytest

from cdcbridge.changes import Sequence
from cdcbridge.coordination import (
    SHARD_END,
    CheckpointerClosedError,
    CheckpointOutOfRangeError,
    CoordinationStats,
    ExtendedSequence,
    FakeClock,
    InMemoryLeaseStore,
    Lease,
    LeaseLostError,
)
from cdcbridge.coordination.checkpoint.checkpointer import ShardCheckpointer
from cdcbridge.coordination.errors import CheckpointError
from cdcbridge.coordination.leases.held import HeldLease
from cdcbridge.coordination.stream.simulator import StreamSimulator

STREAM = "stream-1"


class Fixture:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.store = InMemoryLeaseStore(clock=self.clock)
        self.store.create_lease_if_absent(Lease(STREAM, "s0"))
        self.held = HeldLease(self.store.take(Lease(STREAM, "s0"), "w1"), self.clock.monotonic())
        self.stream = StreamSimulator(STREAM)
        self.records = [self.stream.put(f"k{i}") for i in range(6)]
        self.checkpointer = ShardCheckpointer(self.held, self.store, self.clock, CoordinationStats(), None)

    def hand_out_batches(self) -> None:
        """Two batches: records 0-2 (s0@0 → s0@3) and 3-5 (s0@3 → s0@6)."""
        self.checkpointer.hand_out("s0@0", "s0@3", self.records[:3])
        self.checkpointer.hand_out("s0@3", "s0@6", self.records[3:])

    def stored(self) -> Lease:
        lease = self.store.get_lease(STREAM, "s0")
        assert lease is not None
        return lease


@pytest.fixture
def fx() -> Fixture:
    return Fixture()


def test_checkpoint_without_argument_commits_everything_handed_out(fx: Fixture) -> None:
    fx.hand_out_batches()
    assert fx.checkpointer.largest_permitted_checkpoint == ExtendedSequence(fx.records[-1].sequence)
    fx.checkpointer.checkpoint()
    stored = fx.stored()
    assert stored.checkpoint == "s0@6"  # the iterator after the batch: nothing is read twice on resume
    assert stored.checkpoint_seq == ExtendedSequence(fx.records[-1].sequence)
    assert fx.checkpointer.all_confirmed()


def test_checkpoint_of_a_record_inside_a_batch_resumes_at_the_batch_and_skips_up_to_it(fx: Fixture) -> None:
    fx.hand_out_batches()
    fx.checkpointer.checkpoint(fx.records[1])
    assert (fx.stored().checkpoint, fx.stored().checkpoint_seq) == ("s0@0", ExtendedSequence(fx.records[1].sequence))
    fx.checkpointer.checkpoint(fx.records[2])  # last of its batch: the next batch's iterator
    assert fx.stored().checkpoint == "s0@3"
    assert not fx.checkpointer.all_confirmed()


def test_sub_sequence_checkpoint_sorts_before_the_whole_record(fx: Fixture) -> None:
    fx.hand_out_batches()
    record = fx.records[4]
    fx.checkpointer.checkpoint(record.sequence, 0)
    fx.checkpointer.checkpoint(record.sequence, 2)
    assert fx.stored().checkpoint == "s0@3"
    assert fx.stored().checkpoint_seq == ExtendedSequence(record.sequence, 2)
    with pytest.raises(CheckpointOutOfRangeError, match="behind"):
        fx.checkpointer.checkpoint(record.sequence, 1)
    fx.checkpointer.checkpoint(record)  # the whole record
    assert fx.stored().checkpoint_seq == ExtendedSequence(record.sequence)


def test_checkpoint_beyond_what_was_handed_out_raises(fx: Fixture) -> None:
    with pytest.raises(CheckpointOutOfRangeError, match="beyond"):
        fx.checkpointer.checkpoint(fx.records[0])
    fx.checkpointer.hand_out("s0@0", "s0@3", fx.records[:3])
    with pytest.raises(CheckpointOutOfRangeError, match="beyond"):
        fx.checkpointer.checkpoint(fx.records[4])
    later = fx.stream.put("not-yet-read")
    with pytest.raises(CheckpointOutOfRangeError):
        fx.checkpointer.checkpoint(later.sequence)
    assert fx.stored().checkpoint == "TRIM_HORIZON"


def test_checkpoint_of_an_unknown_sequence_between_records_raises(fx: Fixture) -> None:
    fx.hand_out_batches()
    first = fx.records[0].sequence
    between = Sequence(first.epoch, first.timestamp_us, first.row_index + 1)
    with pytest.raises(CheckpointOutOfRangeError, match="not a record"):
        fx.checkpointer.checkpoint(between)


def test_repeating_the_last_checkpoint_writes_nothing(fx: Fixture) -> None:
    fx.hand_out_batches()
    fx.checkpointer.checkpoint(fx.records[2])
    writes = len(fx.store.write_log)
    fx.checkpointer.checkpoint(fx.records[2])
    assert len(fx.store.write_log) == writes


def test_a_stale_owner_cannot_checkpoint_after_takeover(fx: Fixture) -> None:
    """T3: the zombie's checkpoint fails its condition; the new owner's checkpoint stays."""
    fx.hand_out_batches()
    taken = fx.store.take(fx.stored(), "w2")
    new_owner = fx.store.checkpoint(taken, "s0@6", ExtendedSequence(fx.records[-1].sequence))
    with pytest.raises(LeaseLostError):
        fx.checkpointer.checkpoint(fx.records[1])
    assert fx.stored() == new_owner
    assert fx.held.ended is not None and fx.held.ended.startswith("lost")
    with pytest.raises(LeaseLostError):
        fx.checkpointer.checkpoint(fx.records[2])


def test_a_closed_checkpointer_refuses(fx: Fixture) -> None:
    fx.hand_out_batches()
    fx.checkpointer.close("handed over")
    with pytest.raises(CheckpointerClosedError, match="current processor"):
        fx.checkpointer.checkpoint()


def test_checkpoint_from_another_thread_after_process_records_returned(fx: Fixture) -> None:
    """The Kafka-bridge pattern: acks arrive on a callback thread, checkpoints follow them."""
    fx.hand_out_batches()
    errors: list[Exception] = []

    def ack_callbacks() -> None:
        try:
            for record in fx.records:
                fx.checkpointer.checkpoint(record.sequence, 0)
                fx.checkpointer.checkpoint(record)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=ack_callbacks)
    thread.start()
    thread.join()
    assert errors == []
    assert fx.stored().checkpoint_seq == ExtendedSequence(fx.records[-1].sequence)
    assert fx.stored().counter == 1 + 2 * len(fx.records)  # every checkpoint was one conditional write


def test_shard_end_needs_the_end_read_and_everything_confirmed(fx: Fixture) -> None:
    fx.checkpointer.hand_out("s0@0", "s0@3", fx.records[:3])
    fx.checkpointer.hand_out("s0@3", None, fx.records[3:])  # the closed shard's last batch
    with pytest.raises(CheckpointError, match="every record confirmed"):
        fx.checkpointer.write_shard_end()
    fx.checkpointer.checkpoint(fx.records[-1])
    assert fx.stored().checkpoint == "s0@3"  # last batch has no next iterator: resume at its start
    fx.checkpointer.write_shard_end()
    assert fx.stored().checkpoint == SHARD_END
    assert fx.stored().checkpoint_seq == ExtendedSequence(fx.records[-1].sequence)


def test_positions_round_trip_and_order() -> None:
    seq = Sequence(2, 1_700_000_000_000_123, 7)
    whole, part = ExtendedSequence(seq), ExtendedSequence(seq, 3)
    assert ExtendedSequence.from_text(whole.to_text()) == whole and whole.to_text() == "2:1700000000000123:7"
    assert ExtendedSequence.from_text("2:1700000000000123:7:3") == part
    assert part < whole and ExtendedSequence(seq, 0) < part
    assert whole < ExtendedSequence(Sequence(2, 1_700_000_000_000_123, 8), 0)
    assert whole.covers(seq) and not part.covers(seq)
    with pytest.raises(ValueError, match="CheckpointSeq"):
        ExtendedSequence.from_text("1:2")
