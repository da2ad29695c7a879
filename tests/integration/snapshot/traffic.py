"""The source side of the snapshot tests: a pre-filled table, writes that keep going, and the rows read back."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from tablestore import (
    INF_MAX,
    INF_MIN,
    BatchWriteRowRequest,
    Condition,
    OTSClient,
    PutRowItem,
    Row,
    RowExistenceExpectation,
    TableInBatchWriteRowItem,
)

IGNORE = Condition(RowExistenceExpectation.IGNORE)
REGIONS = ("eu", "us", "ap")


def key(i: int) -> list[tuple[str, Any]]:
    return [("region", REGIONS[i % len(REGIONS)]), ("id", i)]


def prefill(ots: OTSClient, table: str, rows: int) -> None:
    for first in range(0, rows, 200):
        batch = BatchWriteRowRequest()
        items = [PutRowItem(Row(key(i), [("owner", f"user-{i}"), ("balance", i), ("vip", i % 5 == 0)]), IGNORE)
                 for i in range(first, min(first + 200, rows))]  # fmt: skip
        batch.add(TableInBatchWriteRowItem(table, items))
        result = ots.batch_write_row(batch)
        assert result.is_all_succeed()


class Writer:
    """Puts (whole rows), updates (put one column, delete another), increments and deletes on random keys (some
    beyond the pre-filled ones), from its own thread, until stopped."""

    def __init__(self, ots: OTSClient, table: str, keys: int, seed: int = 3, pause: float = 0.003) -> None:
        self._ots, self._table, self._keys = ots, table, keys
        self._rng = random.Random(seed)
        self._pause = pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self.operations = 0
        self.error: BaseException | None = None

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        return self.operations

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._pause):
                self._one()
                self.operations += 1
        except BaseException as error:  # surfaced by stop()
            self.error = error

    def _one(self) -> None:
        rng, table = self._rng, self._table
        row_key = key(rng.randrange(self._keys))
        choice = rng.random()
        if choice < 0.3:
            columns = [
                ("owner", f"w-{rng.randrange(1000)}"),
                ("balance", rng.randrange(1000)),
                ("vip", rng.random() < 0.2),
            ]
            self._ots.put_row(table, Row(row_key, columns), IGNORE)
        elif choice < 0.55:
            self._ots.update_row(table, Row(row_key, {"put": [("note", f"n{rng.randrange(100)}")],
                                                      "delete_all": ["vip"]}), IGNORE)  # fmt: skip
        elif choice < 0.85:
            self._ots.update_row(table, Row(row_key, {"increment": [("balance", rng.randrange(1, 50))]}), IGNORE)
        else:
            self._ots.delete_row(table, Row(row_key), IGNORE)


def source_rows(ots: OTSClient, table: str) -> dict[tuple, dict[str, Any]]:
    rows: dict[tuple, dict[str, Any]] = {}
    start: Any = [("region", INF_MIN), ("id", INF_MIN)]
    end = [("region", INF_MAX), ("id", INF_MAX)]
    while start:
        _, start, page, _ = ots.get_range(table, "FORWARD", start, end, max_version=1)
        for row in page:
            rows[tuple(value for _, value in row.primary_key)] = {
                name: value for name, value, _ in row.attribute_columns
            }
    return rows


def wait_until(probe, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.1)
