"""The chaos load: a seeded mix of writes to the source table on a thread, at a steady rate, whatever fails.

Under injected faults a write can be refused (the service answered with an error: not applied) or ambiguous (the
connection dropped after the emulator applied it, or before: nobody can tell). The generator does not guess: it
counts each outcome, never retries an ambiguous write itself, and the checks take the source's final contents and
its stream as the truth. Increments are part of the mix, so a redelivered increment applied twice would show as a
counter that differs between source and target.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

log = logging.getLogger(__name__)

#: Primary key of the chaos table: (region STRING, id INTEGER), as the demo's.
PRIMARY_KEY = (("region", "STRING"), ("id", "INTEGER"))
PK_NAMES = tuple(name for name, _ in PRIMARY_KEY)
REGIONS = ("eu", "us", "ap")
#: Integer columns only ever changed by increments (or reset by a whole-row put): "applied twice" shows here.
COUNTER_COLUMNS = ("balance", "visits")


class Outcome(StrEnum):
    OK = "ok"
    #: The service answered with an error: the write was not applied.
    REFUSED = "refused"
    #: No answer (connection dropped or timed out): the write may or may not have been applied.
    AMBIGUOUS = "ambiguous"


class Operation(StrEnum):
    PUT = "put"
    UPDATE = "update"
    INCREMENT = "increment"
    MIXED_UPDATE = "update+increment"
    DELETE = "delete"
    BATCH = "batch"


@dataclass
class LoadCounts:
    """Writes attempted, by operation and outcome."""

    by_outcome: Counter[str] = field(default_factory=Counter)
    by_operation: Counter[str] = field(default_factory=Counter)

    @property
    def attempted(self) -> int:
        return sum(self.by_outcome.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempted": self.attempted,
            **{f"writes_{outcome.value}": self.by_outcome.get(outcome.value, 0) for outcome in Outcome},
            "by_operation": dict(sorted(self.by_operation.items())),
        }


def classify_failure(error: BaseException) -> Outcome:
    """REFUSED when the service answered (an OTSServiceError with an HTTP status), else AMBIGUOUS."""
    from tablestore.error import OTSServiceError

    return Outcome.REFUSED if isinstance(error, OTSServiceError) else Outcome.AMBIGUOUS


class LoadGenerator:
    """Writes about `rate` operations/s over `rows` keys until stopped; `counts` says what happened to them."""

    def __init__(self, ots: Any, table: str, *, rows: int, rate: float, seed: int) -> None:
        self._ots = ots
        self._table = table
        self._keys = [[("region", REGIONS[i % len(REGIONS)]), ("id", i)] for i in range(rows)]
        self._interval = 1.0 / rate
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._counts = LoadCounts()
        self.error: BaseException | None = None

    @property
    def counts(self) -> LoadCounts:
        with self._lock:
            return LoadCounts(Counter(self._counts.by_outcome), Counter(self._counts.by_operation))

    def start(self) -> LoadGenerator:
        self._thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> LoadCounts:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
        return self.counts

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        next_at = time.monotonic()
        try:
            while not self._stop.is_set():
                operation, call = self._next_write()
                outcome = self._attempt(call)
                with self._lock:
                    self._counts.by_outcome[outcome.value] += 1
                    self._counts.by_operation[operation.value] += 1
                next_at = max(next_at + self._interval, time.monotonic() - 1.0)  # no burst after a slow spell
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        except BaseException as error:  # a bug in the generator itself: the run reports it
            self.error = error
            log.exception("the chaos load generator stopped")

    @staticmethod
    def _attempt(call: Any) -> Outcome:
        try:
            result = call()
        except Exception as error:
            return classify_failure(error)
        if result is not None and hasattr(result, "is_all_succeed") and not result.is_all_succeed():
            return Outcome.REFUSED  # some rows of a batch were refused (the others applied)
        return Outcome.OK

    def _next_write(self) -> tuple[Operation, Any]:
        """The next operation, drawn from the seeded generator (the draws never depend on outcomes)."""
        from tablestore import (
            BatchWriteRowRequest,
            Condition,
            PutRowItem,
            Row,
            RowExistenceExpectation,
            UpdateRowItem,
        )
        from tablestore import TableInBatchWriteRowItem as BatchItem

        rng = self._random
        ignore = Condition(RowExistenceExpectation.IGNORE)
        key = rng.choice(self._keys)
        ots, table = self._ots, self._table
        choice = rng.random()
        if choice < 0.25:
            columns = [("owner", f"user-{rng.randrange(1000)}"), ("balance", rng.randrange(1000)),
                       ("visits", 0), ("score", rng.random() * 100), ("vip", rng.random() < 0.2)]  # fmt: skip
            return Operation.PUT, lambda: ots.put_row(table, Row(key, columns), ignore)
        if choice < 0.40:
            update = {"put": [("note", f"n{rng.randrange(100)}")], "delete_all": ["score"]}
            return Operation.UPDATE, lambda: ots.update_row(table, Row(key, update), ignore)
        if choice < 0.70:
            increments = [("balance", rng.randrange(1, 50))]
            if rng.random() < 0.5:
                increments.append(("visits", 1))
            return Operation.INCREMENT, lambda: ots.update_row(table, Row(key, {"increment": increments}), ignore)
        if choice < 0.80:
            # One record, two messages (an UPDATE run then an INCREMENT run): exercises sub-sequence checkpoints.
            mixed = {"put": [("note", f"m{rng.randrange(100)}")], "increment": [("visits", rng.randrange(1, 5))]}
            return Operation.MIXED_UPDATE, lambda: ots.update_row(table, Row(key, mixed), ignore)
        if choice < 0.90:
            return Operation.DELETE, lambda: ots.delete_row(table, Row(key), ignore)
        items: list[Any] = []
        for batch_key in rng.sample(self._keys, 5):
            if rng.random() < 0.5:
                items.append(PutRowItem(Row(batch_key, [("owner", "batch"), ("balance", rng.randrange(100))]), ignore))
            else:
                items.append(UpdateRowItem(Row(batch_key, {"increment": [("balance", rng.randrange(1, 9))]}), ignore))
        request = BatchWriteRowRequest()
        request.add(BatchItem(table, items))
        return Operation.BATCH, lambda: ots.batch_write_row(request)
