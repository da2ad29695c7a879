"""Which prefix of a shard's records is fully acknowledged by Kafka (the at-least-once rule).

Records arrive in pages (one fetched batch each) and every record becomes some number of messages. Acknowledgements
arrive in any order (a record's messages may go to several partitions and topics). The confirmed position is the
end of the longest prefix of messages — in (record, sub-sequence) order — that Kafka acknowledged, so a checkpoint
never covers a message that might be lost, and a record that is only partly acknowledged is checkpointed with its
sub-sequence.

This is the per-message hot path of the bridge, so an acknowledgement only sets one flag of its page (librdkafka's
delivery report calls :meth:`AckPage.on_delivery` directly); the prefix is worked out when a checkpoint is due,
with C-speed searches over the flags. Setting a flag and appending to a list are atomic in CPython, so reports
served by several threads need no lock.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdcbridge.changes import Sequence
from cdcbridge.kafka.errors import KafkaSideError

#: How often a wait for the last acknowledgements looks again (acks set flags, they do not signal).
_WAIT_POLL_SECONDS = 0.005


@dataclass(frozen=True, slots=True)
class ConfirmedPosition:
    """`sub_sequence is None`: the whole record at `sequence` (and all before it) is acknowledged."""

    sequence: Sequence
    sub_sequence: int | None


#: Told of a message Kafka did not take: (page, message index, the error in our words).
FailureHandler = Callable[["AckPage", int, KafkaSideError], None]
#: Turns librdkafka's error and message into our error (the sink does this, and counts the failure).
ErrorDescriber = Callable[[Any, Any], KafkaSideError]


class AckPage:
    """One page of a shard's records in flight, with one acknowledgement flag per message produced for it.

    Record ``r`` (``sequences[r]``) owns the messages ``ends[r-1] .. ends[r]-1`` (``ends[-1]`` being 0), which are its
    parts ``first_subs[r]`` onwards: parts before ``first_subs[r]`` were confirmed before a restart. A record that
    produced nothing (covered by the snapshot) owns an empty range and is complete at once.
    """

    __slots__ = ("acked", "describe", "ends", "first_subs", "keys", "latencies", "on_failure", "sequences", "topics")

    def __init__(
        self,
        sequences: list[Sequence],
        first_subs: list[int],
        ends: list[int],
        topics: list[str],
        keys: list[bytes],
        *,
        on_failure: FailureHandler,
        describe: ErrorDescriber,
    ) -> None:
        self.sequences = sequences
        self.first_subs = first_subs
        self.ends = ends
        #: The topic of each message (counted per topic once the page is done).
        self.topics = topics
        #: The key of each message (a dead-letter reference names it).
        self.keys = keys
        self.acked = bytearray(len(topics))
        #: librdkafka's produce → ack time of each acknowledged message (None when it does not know).
        self.latencies: list[float | None] = []
        self.on_failure = on_failure
        self.describe = describe

    def on_delivery(self, index: int, error: Any, message: Any) -> None:
        """librdkafka's delivery report for message `index` (bound with functools.partial; any thread)."""
        if error is None:
            self.acked[index] = 1
            self.latencies.append(message.latency())
        else:
            self.on_failure(self, index, self.describe(error, message))

    def mark_acked(self, index: int) -> None:
        """Message `index` counts as delivered (its dead-letter reference was acknowledged instead)."""
        self.acked[index] = 1

    def fail(self, index: int, error: KafkaSideError) -> None:
        """Message `index` was refused before it was queued."""
        self.on_failure(self, index, error)

    def locate(self, index: int) -> tuple[int, int]:
        """(record position in the page, sub-sequence) of message `index`."""
        record = bisect_right(self.ends, index)
        start = self.ends[record - 1] if record else 0
        return record, self.first_subs[record] + index - start

    @property
    def complete(self) -> bool:
        return self.acked.find(0) < 0

    @property
    def unacknowledged(self) -> int:
        return self.acked.count(0)

    def confirmed(self) -> ConfirmedPosition | None:
        """The end of the acknowledged prefix inside this page, or None when it ends before the page's first record
        (the position of the pages before it stands)."""
        gap = self.acked.find(0)
        if gap < 0:
            return ConfirmedPosition(self.sequences[-1], None) if self.sequences else None
        record, sub = self.locate(gap)
        if sub > 0:
            return ConfirmedPosition(self.sequences[record], sub - 1)
        if record > 0:
            return ConfirmedPosition(self.sequences[record - 1], None)
        return None


class AckTracker:
    """The pages of one shard in flight, in shard order: pages are added by the processing thread, acknowledged by
    Kafka's delivery thread, and summed up by the checkpoint thread."""

    def __init__(self, on_page_done: Callable[[AckPage], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._pages: deque[AckPage] = deque()
        self._last_complete: Sequence | None = None
        #: Told of each page whose messages were all acknowledged, once, when the prefix passes it.
        self._on_page_done = on_page_done

    def add(self, page: AckPage) -> None:
        """The next page of the shard (before any of its messages is produced)."""
        with self._lock:
            self._pages.append(page)

    def confirmed(self) -> ConfirmedPosition | None:
        """The end of the longest acknowledged prefix (None while nothing is confirmed since the start)."""
        done: list[AckPage] = []
        with self._lock:
            pages = self._pages
            while pages and pages[0].complete:
                page = pages.popleft()
                done.append(page)
                if page.sequences:
                    self._last_complete = page.sequences[-1]
            position = pages[0].confirmed() if pages else None
            if position is None and self._last_complete is not None:
                position = ConfirmedPosition(self._last_complete, None)
        if self._on_page_done is not None:
            for page in done:
                self._on_page_done(page)
        return position

    @property
    def in_flight(self) -> int:
        """Messages produced but not acknowledged yet."""
        with self._lock:
            return sum(page.unacknowledged for page in self._pages)

    def drain(self) -> list[AckPage]:
        """Take the pages not yet passed by the prefix (the processor is done with the shard)."""
        with self._lock:
            pages = list(self._pages)
            self._pages.clear()
            return pages

    def wait_all_acked(self, timeout: float | None) -> bool:
        """Block until every produced message is acknowledged (True) or `timeout` passes (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.in_flight:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(_WAIT_POLL_SECONDS)
        return True
