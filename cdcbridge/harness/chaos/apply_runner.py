"""The apply job during a chaos run: a streaming query on a thread, started again whenever it fails.

The job lives through the same faults as the bridge (a broker restart, the registry away), so a failed query is
expected now and then; what matters is that it comes back and that the target ends equal to the source, which
the final catch-up (`cdcbridge.harness.demo.apply_until_equal`) checks.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: Pause before starting the query again after a failure.
RESTART_DELAY_SECONDS = 5.0


@dataclass
class BackgroundApplyStats:
    runs: int = 0
    #: Duplicates dropped by runs that ended normally (a failed run's report is lost with it).
    duplicates_absorbed: int = 0
    failures: list[str] = field(default_factory=list)
    #: Runs that ended with an error because the harness stopped them in the middle of a micro-batch.
    interrupted_by_stop: int = 0


class BackgroundApply:
    def __init__(self, config: Any, spark: Any) -> None:
        self._config = config
        self._spark = spark
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats = BackgroundApplyStats()

    def start(self) -> BackgroundApply:
        self._thread = threading.Thread(target=self._run, name="chaos-apply", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 300.0, idle_timeout: float = 120.0) -> BackgroundApplyStats:
        """Stop once the query is idle (or after `idle_timeout`): stopping it interrupts a running micro-batch,
        which ends the run with an error and loses its report (the batch itself is simply re-run later)."""
        self._wait_idle(idle_timeout)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.stats

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._thread is not None and self._thread.is_alive():
            try:
                statuses = [query.status for query in self._spark.streams.active]
            except Exception:  # the session is shutting down: nothing to wait for
                return
            if not any(s["isTriggerActive"] or s["isDataAvailable"] for s in statuses):
                return
            time.sleep(0.2)

    def _run(self) -> None:
        from cdcbridge.apply.job import run_apply

        while not self._stop.is_set():
            self.stats.runs += 1
            try:
                summary = run_apply(self._config, stop_event=self._stop, spark=self._spark)
            except Exception as error:
                first_line = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
                if self._stop.is_set():
                    # Stopping the query interrupts a running micro-batch, which surfaces as a failure; the
                    # batch is re-run (a no-op once applied) by the next run, so this is not a failure of the job.
                    self.stats.interrupted_by_stop += 1
                    return
                self.stats.failures.append(f"{type(error).__name__}: {first_line}")
                log.warning("the apply job failed (restarting in %.0fs): %s", RESTART_DELAY_SECONDS, first_line)
                self._stop.wait(RESTART_DELAY_SECONDS)
                continue
            stats = summary.report.stats
            self.stats.duplicates_absorbed += stats.duplicates + stats.stale
