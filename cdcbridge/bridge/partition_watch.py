"""Keeps checking, while the bridge runs, that no topic's partition count changed behind its back.

The start-up check refuses a changed count; this one catches a change made later (someone adds partitions to a live
topic). The producer follows a partition increase on its next metadata refresh, which moves keys to other
partitions and breaks per-row order from then on, so the worker stops, drains and exits with the topic named.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Protocol

from cdcbridge.kafka.errors import KafkaSideError, TopicPartitionMismatchError

log = logging.getLogger(__name__)


class PartitionCounts(Protocol):
    def partition_counts(self, names: list[str]) -> dict[str, int]: ...


class PartitionWatch:
    def __init__(
        self, admin: PartitionCounts, expected: Mapping[str, int], stop: threading.Event, interval_seconds: float
    ) -> None:
        self._admin = admin
        self._expected = dict(expected)
        self._stop_bridge = stop
        self._interval = interval_seconds
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        #: The mismatch that stopped the bridge, raised by `run_bridge` once the workers drained.
        self.failure: TopicPartitionMismatchError | None = None

    def check_once(self) -> TopicPartitionMismatchError | None:
        """Compare the current counts with the expected ones; a broker that does not answer is not a mismatch."""
        try:
            current = self._admin.partition_counts(list(self._expected))
        except KafkaSideError as error:
            log.warning("could not re-check topic partition counts (will retry): %s", error)
            return None
        for topic, expected in self._expected.items():
            actual = current.get(topic)
            if actual is not None and actual != expected:
                return TopicPartitionMismatchError(
                    f"topic {topic} now has {actual} partitions but had {expected} when this worker started; "
                    "changing the count moves keys to other partitions and breaks per-row order, so the worker "
                    f"stopped. Restore the topic with {expected} partitions (recreate it and re-snapshot), or "
                    f"configure a new topic name to use {actual}"
                )
        return None

    def start(self) -> PartitionWatch:
        if self._expected:
            self._thread = threading.Thread(target=self._run, name="partition-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._done.wait(self._interval):
            failure = self.check_once()
            if failure is not None:
                log.error("%s", failure)
                self.failure = failure
                self._stop_bridge.set()
                return
