"""A range's progress moves only over pages whose every message Kafka acknowledged, in page order."""

from __future__ import annotations

from cdcbridge.kafka.errors import ProduceFatalError
from cdcbridge.kafka.sink import Delivery
from cdcbridge.snapshot.range_acks import RangeAcks

OK = Delivery("t", 0, 0, None)


def test_progress_covers_only_the_acknowledged_prefix_of_pages() -> None:
    acks = RangeAcks(rows_before=100)
    first = acks.add_page([("id", 10)], rows=3, messages=3)
    second = acks.add_page([("id", 20)], rows=2, messages=2)
    assert acks.confirmed() is None
    acks.ack(second, OK)
    acks.ack(second, OK)
    assert acks.confirmed() is None  # the second page is complete, the first is not
    acks.ack(first, OK)
    acks.ack(first, OK)
    assert acks.confirmed() is None
    acks.ack(first, OK)
    assert acks.confirmed() == ([("id", 20)], 105)  # rows counted on top of what the stored progress had


def test_an_empty_last_page_finishes_the_range() -> None:
    acks = RangeAcks()
    acks.add_page(None, rows=0, messages=0)
    assert acks.confirmed() == (None, 0)


def test_a_failed_delivery_stops_the_range_before_its_page() -> None:
    acks = RangeAcks()
    first = acks.add_page([("id", 5)], rows=1, messages=1)
    second = acks.add_page(None, rows=1, messages=1)
    acks.ack(first, OK)
    acks.ack(second, Delivery("t", 0, 0, ProduceFatalError("refused")))
    assert acks.wait(max_pending=0, timeout=0)  # a failure ends any wait
    assert isinstance(acks.failure, ProduceFatalError)
    assert acks.confirmed() == ([("id", 5)], 1)


def test_waiting_for_room_counts_unacknowledged_pages() -> None:
    acks = RangeAcks()
    pages = [acks.add_page([("id", i)], rows=1, messages=1) for i in range(3)]
    assert not acks.wait(max_pending=2, timeout=0)
    acks.ack(pages[1], OK)
    assert acks.wait(max_pending=2, timeout=0)
    assert acks.pending_pages() == 2
