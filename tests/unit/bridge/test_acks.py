import random
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.bridge.acks import AckTracker, ConfirmedPosition
from cdcbridge.changes import Sequence


def seq(i: int) -> Sequence:
    return Sequence(1, 1_000_000 + i, 0)


def test_nothing_confirmed_until_the_first_ack() -> None:
    tracker = AckTracker()
    record = tracker.register(seq(0), 2)
    assert tracker.confirmed() is None
    tracker.ack(record, 1)  # the second part alone confirms nothing: part 0 may still be lost
    assert tracker.confirmed() is None
    tracker.ack(record, 0)
    assert tracker.confirmed() == ConfirmedPosition(seq(0), None)


def test_a_partly_acknowledged_record_is_confirmed_with_its_sub_sequence() -> None:
    tracker = AckTracker()
    first = tracker.register(seq(0), 1)
    second = tracker.register(seq(1), 3)
    tracker.ack(first, 0)
    tracker.ack(second, 0)
    assert tracker.confirmed() == ConfirmedPosition(seq(1), 0)
    tracker.ack(second, 2)
    assert tracker.confirmed() == ConfirmedPosition(seq(1), 0)
    tracker.ack(second, 1)
    assert tracker.confirmed() == ConfirmedPosition(seq(1), None)


def test_a_later_record_acknowledged_first_does_not_move_the_position() -> None:
    tracker = AckTracker()
    a, b = tracker.register(seq(0), 1), tracker.register(seq(1), 1)
    tracker.ack(b, 0)
    assert tracker.confirmed() is None
    assert tracker.in_flight == 1
    tracker.ack(a, 0)
    assert tracker.confirmed() == ConfirmedPosition(seq(1), None)
    assert tracker.in_flight == 0


def test_resuming_part_way_counts_earlier_parts_as_confirmed() -> None:
    tracker = AckTracker()
    record = tracker.register(seq(5), 4, first_sub=2)  # parts 0 and 1 were confirmed before the restart
    assert tracker.confirmed() == ConfirmedPosition(seq(5), 1)  # what was already committed, never less
    tracker.ack(record, 2)
    assert tracker.confirmed() == ConfirmedPosition(seq(5), 2)
    tracker.ack(record, 3)
    assert tracker.confirmed() == ConfirmedPosition(seq(5), None)


def test_duplicate_acks_are_harmless_and_wait_returns_when_all_are_in() -> None:
    tracker = AckTracker()
    record = tracker.register(seq(0), 2)
    tracker.ack(record, 0)
    tracker.ack(record, 0)
    assert tracker.in_flight == 1
    assert tracker.wait_all_acked(0.01) is False
    threading.Timer(0.05, tracker.ack, (record, 1)).start()
    assert tracker.wait_all_acked(5) is True


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=12),
    seed=st.integers(0, 10_000),
    cut=st.floats(0, 1),
)
def test_confirmed_position_is_exactly_the_acknowledged_prefix(parts: list[int], seed: int, cut: float) -> None:
    tracker = AckTracker()
    records = [tracker.register(seq(i), n) for i, n in enumerate(parts)]
    messages = [(i, sub) for i, n in enumerate(parts) for sub in range(n)]
    random.Random(seed).shuffle(messages)
    acked = set(messages[: int(len(messages) * cut)])
    for i, sub in acked:
        tracker.ack(records[i], sub)
    # Reference: walk messages in (record, sub) order until the first unacknowledged one.
    expected = None
    for i, n in enumerate(parts):
        done = [sub for sub in range(n) if (i, sub) in acked]
        prefix = 0
        while prefix < n and prefix in done:
            prefix += 1
        if prefix == n:
            expected = ConfirmedPosition(seq(i), None)
            continue
        if prefix > 0:
            expected = ConfirmedPosition(seq(i), prefix - 1)
        break
    assert tracker.confirmed() == expected
    assert tracker.in_flight == len(messages) - len(acked)
