"""The one door to the model: a lock that serialises calls, the clock, and the journal that makes them durable.

Calls are made by method name (`backend.call("write_row", table, change)`) so the journal can record exactly the
call it will replay. Commit order, journal order and stream order are therefore one and the same.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from cdcbridge.emulator.errors import EmulatorError
from cdcbridge.emulator.journal import Journal
from cdcbridge.emulator.model import Instance, Limits

log = logging.getLogger(__name__)

#: Model methods that change state; only these are journaled.
MUTATING_METHODS = frozenset(
    {
        "create_table",
        "update_table",
        "delete_table",
        "write_row",
        "batch_write",
        "split_shard",
        "merge_shards",
        "trim_stream",
    }
)


def wall_clock_us() -> int:
    return time.time_ns() // 1000


class Backend:
    """An Instance behind a lock, optionally persisted in `data_dir` (see journal.py for the guarantees)."""

    def __init__(
        self,
        *,
        data_dir: str | None = None,
        increments_as_deltas: bool = False,
        limits: Limits | None = None,
        clock_us: Callable[[], int] = wall_clock_us,
        fsync_interval_s: float = 1.0,
    ) -> None:
        self.lock = threading.RLock()
        self.clock_us = clock_us
        self.journal = Journal(data_dir, fsync_interval_s=fsync_interval_s) if data_dir else None
        self._takes_now: dict[str, bool] = {}
        instance = Instance(increments_as_deltas=increments_as_deltas, limits=limits)
        replayed = 0
        settings_changed = False
        if self.journal is not None:
            state, entries = self.journal.load()
            if state is not None:
                instance = state
            replayed = self._replay(instance, entries)
            settings_changed = instance.increments_as_deltas != increments_as_deltas or (
                limits is not None and instance.limits != limits
            )
            log.info("emulator state loaded from %s (%d journaled calls replayed)", data_dir, replayed)
        instance.increments_as_deltas = increments_as_deltas
        if limits is not None:
            instance.limits = limits
        self.instance = instance
        # A fresh snapshot when the journal was replayed (faster next start) or the settings changed (the journal
        # that follows is replayed with the settings it was written under).
        if self.journal is not None and (replayed or settings_changed):
            self.journal.compact(self.instance)

    def _accepts_now(self, method: str) -> bool:
        if method not in self._takes_now:
            self._takes_now[method] = "now_us" in inspect.signature(getattr(Instance, method)).parameters
        return self._takes_now[method]

    def _replay(self, instance: Instance, entries: Any) -> int:
        count = 0
        for method, args, kwargs, _now in entries:
            try:
                getattr(instance, method)(*args, **kwargs)
            except EmulatorError as error:  # pragma: no cover - a journaled call succeeded once, so it does again
                log.warning("replaying %s failed: %s", method, error)
            count += 1
        return count

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run one model method under the lock; journal it if it changed state (it raised nothing)."""
        with self.lock:
            now = self.clock_us()
            if self._accepts_now(method):
                kwargs["now_us"] = now
            result = getattr(self.instance, method)(*args, **kwargs)
            if self.journal is not None and method in MUTATING_METHODS:
                self.journal.append((method, args, kwargs, now))
            return result

    def close(self) -> None:
        """Write a final snapshot (fast restart) and release the files."""
        with self.lock:
            if self.journal is not None:
                self.journal.compact(self.instance)
                self.journal.close()
