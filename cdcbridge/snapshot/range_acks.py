"""Which pages of one key range Kafka has acknowledged completely, in page order (the export's at-least-once rule).

A page is the rows of one GetRange call; it is registered with the key the next page starts from and the number of
messages its rows became. Acknowledgements arrive in any order; the confirmed position is the end of the longest
prefix of complete pages, so a range's stored progress never passes a row whose messages might be lost.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from cdcbridge.kafka.errors import KafkaSideError
from cdcbridge.kafka.sink import Delivery
from cdcbridge.snapshot.key_bounds import KeyBound


@dataclass(eq=False)
class Page:
    next_key: KeyBound | None
    rows: int
    outstanding: int


class RangeAcks:
    """Thread-safe: pages are added by the exporting thread, acknowledged from Kafka's delivery thread."""

    def __init__(self, rows_before: int = 0) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pages: deque[Page] = deque()
        self._confirmed: tuple[KeyBound | None, int] | None = None
        self._rows = rows_before
        self.failure: KafkaSideError | None = None

    def add_page(self, next_key: KeyBound | None, rows: int, messages: int) -> Page:
        page = Page(next_key, rows, messages)
        with self._lock:
            self._pages.append(page)
        return page

    def ack(self, page: Page, delivery: Delivery) -> None:
        """Delivery callback of one message of `page`."""
        with self._changed:
            if delivery.error is not None:
                self.failure = self.failure or delivery.error
            else:
                page.outstanding -= 1
            self._changed.notify_all()

    def confirmed(self) -> tuple[KeyBound | None, int] | None:
        """(key to resume from — None once the range is finished —, rows acknowledged) of the complete prefix; None
        while no page completed."""
        with self._lock:
            while self._pages and self._pages[0].outstanding <= 0:
                page = self._pages.popleft()
                self._rows += page.rows
                self._confirmed = (page.next_key, self._rows)
            return self._confirmed

    def pending_pages(self) -> int:
        with self._lock:
            return sum(1 for page in self._pages if page.outstanding > 0)

    def wait(self, *, max_pending: int, timeout: float) -> bool:
        """Block until at most `max_pending` pages wait for acknowledgements, or a delivery failed (True), or
        `timeout` passes (False)."""
        with self._changed:
            return self._changed.wait_for(
                lambda: (
                    self.failure is not None or sum(1 for page in self._pages if page.outstanding > 0) <= max_pending
                ),
                timeout,
            )
