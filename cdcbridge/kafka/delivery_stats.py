"""What the sink counts of every message: produced, acknowledged and failed per topic, and the produce → ack latency
that librdkafka measures itself.

Plain per-thread tallies, because this is the per-message hot path: a Prometheus counter and histogram update per
message would cost several microseconds. The metrics layer exports the increases (cdcbridge.bridge.worker_metrics).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Upper bounds (seconds) of the produce → ack latency buckets: a healthy local broker acks in milliseconds, a
#: struggling one in seconds. The metrics layer exports the counts with the same bounds.
LATENCY_BUCKETS_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class DeliveryCounts:
    """Cumulative counts since the sink started (a snapshot of :class:`DeliveryStats`)."""

    produced: dict[str, int]
    acked: dict[str, int]
    #: (topic, librdkafka error name such as ``_MSG_TIMED_OUT``) → messages that failed for good
    failed: dict[tuple[str, str], int]
    latency_bounds: tuple[float, ...]
    #: Acks per latency bucket (not cumulative); the last entry counts latencies above every bound.
    latency_counts: tuple[int, ...]
    latency_sum_seconds: float

    @property
    def latency_observations(self) -> int:
        return sum(self.latency_counts)


class _Tally:
    """One thread's counts. Only its own thread writes it, so counting takes no lock; readers copy its containers,
    which CPython does atomically."""

    __slots__ = ("acked", "failed", "latency_counts", "latency_sum", "produced")

    def __init__(self, buckets: int) -> None:
        self.produced: dict[str, int] = {}
        self.acked: dict[str, int] = {}
        self.failed: dict[tuple[str, str], int] = {}
        self.latency_counts = [0] * (buckets + 1)
        self.latency_sum = 0.0


class DeliveryStats:
    """Per-topic produce / ack / failure counts and a produce → ack latency histogram, counted per message at a
    fraction of a microsecond (no lock: each thread counts into its own tally; :meth:`snapshot` adds them up)."""

    def __init__(self, latency_bounds: Iterable[float] = LATENCY_BUCKETS_SECONDS) -> None:
        self.latency_bounds = tuple(latency_bounds)
        if list(self.latency_bounds) != sorted(set(self.latency_bounds)):
            raise ValueError(f"latency bucket bounds must increase strictly: {self.latency_bounds}")
        self._local = threading.local()
        self._tallies: list[_Tally] = []
        self._register_lock = threading.Lock()

    def _register(self) -> _Tally:
        """This thread's tally, created at its first count."""
        tally = self._local.tally = _Tally(len(self.latency_bounds))
        with self._register_lock:
            self._tallies.append(tally)
        return tally

    # The three counting methods run once per message: each looks its tally up inline (one call less).
    def produced(self, topic: str) -> None:
        try:
            counts = self._local.tally.produced
        except AttributeError:
            counts = self._register().produced
        counts[topic] = counts.get(topic, 0) + 1

    def acked(self, topic: str, latency_seconds: float | None) -> None:
        """An ack; ``latency_seconds`` is librdkafka's produce → ack time of the message (None if unknown)."""
        try:
            tally = self._local.tally
        except AttributeError:
            tally = self._register()
        counts = tally.acked
        counts[topic] = counts.get(topic, 0) + 1
        if latency_seconds is not None:
            tally.latency_counts[bisect.bisect_left(self.latency_bounds, latency_seconds)] += 1
            tally.latency_sum += latency_seconds

    def produced_many(self, counts: Mapping[str, int]) -> None:
        """Messages produced, per topic, counted once per page (the bridge's hot path)."""
        try:
            tally = self._local.tally.produced
        except AttributeError:
            tally = self._register().produced
        for topic, count in counts.items():
            tally[topic] = tally.get(topic, 0) + count

    def acked_many(self, counts: Mapping[str, int], latencies: Iterable[float | None]) -> None:
        """Acks per topic and their produce → ack latencies (None: unknown), counted once per page."""
        try:
            tally = self._local.tally
        except AttributeError:
            tally = self._register()
        acked = tally.acked
        for topic, count in counts.items():
            acked[topic] = acked.get(topic, 0) + count
        bounds, buckets, total = self.latency_bounds, tally.latency_counts, 0.0
        for latency in latencies:
            if latency is not None:
                buckets[bisect.bisect_left(bounds, latency)] += 1
                total += latency
        tally.latency_sum += total

    def failed(self, topic: str, kind: str) -> None:
        """``kind``: the librdkafka error name (a bounded token), never the error text."""
        try:
            counts = self._local.tally.failed
        except AttributeError:
            counts = self._register().failed
        counts[(topic, kind)] = counts.get((topic, kind), 0) + 1

    def snapshot(self) -> DeliveryCounts:
        with self._register_lock:
            tallies = list(self._tallies)
        produced: dict[str, int] = {}
        acked: dict[str, int] = {}
        failed: dict[tuple[str, str], int] = {}
        latency = [0] * (len(self.latency_bounds) + 1)
        latency_sum = 0.0
        for tally in tallies:
            for total, part in ((produced, tally.produced.copy()), (acked, tally.acked.copy())):
                for topic, count in part.items():
                    total[topic] = total.get(topic, 0) + count
            for key, count in tally.failed.copy().items():
                failed[key] = failed.get(key, 0) + count
            for index, count in enumerate(tally.latency_counts.copy()):
                latency[index] += count
            latency_sum += tally.latency_sum
        return DeliveryCounts(produced, acked, failed, self.latency_bounds, tuple(latency), latency_sum)
