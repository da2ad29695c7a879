import random
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.bridge.acks import AckPage, AckTracker, ConfirmedPosition
from cdcbridge.changes import Sequence
from cdcbridge.kafka.errors import ProduceFatalError


def seq(i: int) -> Sequence:
    return Sequence(1, 1_000_000 + i, 0)


class Message:
    def __init__(self, latency: float | None = 0.003) -> None:
        self._latency = latency

    def latency(self) -> float | None:
        return self._latency


def page(first: int, parts: list[int], first_subs: list[int] | None = None, failures: list | None = None) -> AckPage:
    """Records seq(first), seq(first+1), … with `parts[i]` messages produced each."""
    first_subs = first_subs or [0] * len(parts)
    ends, total = [], 0
    for count in parts:
        total += count
        ends.append(total)
    return AckPage(
        [seq(first + i) for i in range(len(parts))], first_subs, ends, ["t"] * total, [b"k"] * total,
        on_failure=lambda p, index, error: (failures if failures is not None else []).append((index, error)),
        describe=lambda error, message: ProduceFatalError(str(error)),
    )  # fmt: skip


def ack(p: AckPage, index: int) -> None:
    p.on_delivery(index, None, Message())


def test_nothing_confirmed_until_the_first_ack() -> None:
    tracker = AckTracker()
    tracker.add(p := page(0, [2]))
    assert tracker.confirmed() is None
    ack(p, 1)  # the second part alone confirms nothing: part 0 may still be lost
    assert tracker.confirmed() is None
    ack(p, 0)
    assert tracker.confirmed() == ConfirmedPosition(seq(0), None)


def test_a_partly_acknowledged_record_is_confirmed_with_its_sub_sequence() -> None:
    tracker = AckTracker()
    tracker.add(p := page(0, [1, 3]))
    ack(p, 0)
    ack(p, 1)
    assert tracker.confirmed() == ConfirmedPosition(seq(1), 0)
    ack(p, 3)
    assert tracker.confirmed() == ConfirmedPosition(seq(1), 0)
    ack(p, 2)
    assert tracker.confirmed() == ConfirmedPosition(seq(1), None)


def test_a_later_page_acknowledged_first_does_not_move_the_position() -> None:
    tracker = AckTracker()
    tracker.add(a := page(0, [1]))
    tracker.add(b := page(1, [1]))
    ack(b, 0)
    assert tracker.confirmed() is None
    assert tracker.in_flight == 1
    ack(a, 0)
    assert tracker.confirmed() == ConfirmedPosition(seq(1), None)
    assert tracker.in_flight == 0


def test_resuming_part_way_counts_earlier_parts_as_confirmed() -> None:
    tracker = AckTracker()
    tracker.add(p := page(5, [2], first_subs=[2]))  # parts 0 and 1 of 4 were confirmed before the restart
    assert tracker.confirmed() == ConfirmedPosition(seq(5), 1)  # what was already committed, never less
    ack(p, 0)
    assert tracker.confirmed() == ConfirmedPosition(seq(5), 2)
    ack(p, 1)
    assert tracker.confirmed() == ConfirmedPosition(seq(5), None)


def test_records_that_produced_nothing_are_confirmed_with_their_neighbours() -> None:
    tracker = AckTracker()
    tracker.add(p := page(0, [0, 1, 0, 0]))  # covered by the snapshot, one message, covered, covered
    assert tracker.confirmed() == ConfirmedPosition(seq(0), None)
    ack(p, 0)
    assert tracker.confirmed() == ConfirmedPosition(seq(3), None)
    tracker.add(page(4, [0, 0]))
    assert tracker.confirmed() == ConfirmedPosition(seq(5), None)


def test_duplicate_acks_are_harmless_and_wait_returns_when_all_are_in() -> None:
    tracker = AckTracker()
    tracker.add(p := page(0, [2]))
    ack(p, 0)
    ack(p, 0)
    assert tracker.in_flight == 1
    assert tracker.wait_all_acked(0.01) is False
    threading.Timer(0.05, ack, (p, 1)).start()
    assert tracker.wait_all_acked(5) is True


def test_each_finished_page_is_reported_once_with_its_latencies() -> None:
    done: list[AckPage] = []
    tracker = AckTracker(on_page_done=done.append)
    tracker.add(a := page(0, [1, 1]))
    tracker.add(b := page(2, [1]))
    ack(a, 0)
    b.on_delivery(0, None, Message(None))
    tracker.confirmed()
    assert done == []
    ack(a, 1)
    tracker.confirmed()
    tracker.confirmed()
    assert done == [a, b]
    assert a.latencies == [0.003, 0.003] and b.latencies == [None]


def test_a_failed_delivery_reaches_the_handler_in_our_words_and_holds_the_position() -> None:
    failures: list = []
    tracker = AckTracker()
    tracker.add(p := page(0, [1, 1, 1], failures=failures))
    ack(p, 0)
    p.on_delivery(1, "TOPIC_AUTHORIZATION_FAILED", Message())
    ack(p, 2)
    assert [(index, str(error)) for index, error in failures] == [(1, "TOPIC_AUTHORIZATION_FAILED")]
    assert tracker.confirmed() == ConfirmedPosition(seq(0), None)
    p.mark_acked(1)  # e.g. its dead-letter reference was acknowledged
    assert tracker.confirmed() == ConfirmedPosition(seq(2), None)


def test_locate_maps_a_message_to_its_record_and_sub_sequence() -> None:
    p = page(0, [2, 0, 3], first_subs=[1, 0, 0])
    assert [p.locate(i) for i in range(5)] == [(0, 1), (0, 2), (2, 0), (2, 1), (2, 2)]


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=14),
    page_size=st.integers(1, 5),
    seed=st.integers(0, 10_000),
    cut=st.floats(0, 1),
)
def test_confirmed_position_is_exactly_the_acknowledged_prefix(
    parts: list[int], page_size: int, seed: int, cut: float
) -> None:
    tracker = AckTracker()
    pages: list[tuple[AckPage, int]] = []  # (page, index of its first record)
    for first in range(0, len(parts), page_size):
        tracker.add(p := page(first, parts[first : first + page_size]))
        pages.append((p, first))
    messages = [(i, sub) for i, n in enumerate(parts) for sub in range(n)]
    random.Random(seed).shuffle(messages)
    acked = set(messages[: int(len(messages) * cut)])
    for i, sub in acked:
        p, first = next((p, f) for p, f in reversed(pages) if f <= i)
        ack(p, sum(parts[first:i]) + sub)
    # Reference: walk messages in (record, sub) order until the first unacknowledged one.
    expected = None
    for i, n in enumerate(parts):
        prefix = 0
        while prefix < n and (i, prefix) in acked:
            prefix += 1
        if prefix == n:
            expected = ConfirmedPosition(seq(i), None)
            continue
        if prefix > 0:
            expected = ConfirmedPosition(seq(i), prefix - 1)
        break
    assert tracker.confirmed() == expected
    assert tracker.in_flight == len(messages) - len(acked)
