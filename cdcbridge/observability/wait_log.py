"""The log of a process waiting for something another process creates (a table, a topic): once a minute, and at
once whenever what is missing changes, so a reader sees the wait and its cause without the log filling up."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

#: How often an unchanged wait is logged again.
WAIT_LOG_INTERVAL_SECONDS = 60.0


class WaitLog:
    """Logs `problem` as a WARNING when it is new or `interval` has passed since it was last logged."""

    def __init__(
        self, log: logging.Logger, *, interval: float = WAIT_LOG_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self._log = log
        self._interval = interval
        self._clock = clock
        self._logged_at: float | None = None
        self._logged_problem = ""

    @property
    def waited(self) -> bool:
        """Whether a wait was logged, so the end of the wait is worth a line too."""
        return self._logged_at is not None

    def waiting(self, problem: str, template: str) -> None:
        """Log `template` (one `%s` for the problem) if the problem is new or its last line is `interval` old."""
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= self._interval or problem != self._logged_problem:
            self._log.warning(template, problem)
            self._logged_at, self._logged_problem = now, problem
