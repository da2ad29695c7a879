"""A read that keeps failing with a non-transient error (a corrupt record, a refused request) holds the shard at
its checkpoint, backs off more with each failure up to a cap, logs the first and every tenth failure, and delivers
everything once the read works again."""

from __future__ import annotations

import itertools
import logging

import pytest

from cdcbridge.coordination.errors import StreamError
from cdcbridge.coordination.lifecycle.tasks import MAX_READ_RETRY_SECONDS
from tests.unit.coordination.helpers import Cluster


def test_a_failing_read_backs_off_longer_each_time_and_nothing_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="cdcbridge")
    cluster = Cluster()
    for i in range(10):
        cluster.stream.put(f"k{i}")
    attempts: list[float] = []
    real_get_records = cluster.stream.get_records

    def corrupt_for_a_while(iterator: str, limit: int):  # type: ignore[no-untyped-def]
        attempts.append(cluster.clock.monotonic())
        if len(attempts) <= 12:
            raise StreamError("CorruptRecordError: row checksum mismatch (record #3)")
        return real_get_records(iterator, limit)

    cluster.stream.get_records = corrupt_for_a_while  # type: ignore[method-assignment]
    cluster.add_worker("w1")
    cluster.run_until(lambda: len(cluster.journal.deliveries) == 10, limit=3600)

    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts[:12])]
    assert all(b >= a for a, b in itertools.pairwise(gaps)), f"back-off never shrinks: {gaps}"
    assert gaps[-1] > 4 * gaps[0], f"the back-off grows: {gaps}"
    assert max(gaps) <= MAX_READ_RETRY_SECONDS + 1.0, "the back-off is capped"
    assert [d.key for d in cluster.journal.deliveries] == [f"k{i}" for i in range(10)], "nothing skipped"
    logged = [r.getMessage() for r in caplog.records if "reading records failed" in r.getMessage()]
    assert len(logged) == 2, f"the first and the tenth failure are logged, not every one: {logged}"
    assert "checksum mismatch" in logged[0] and "1 time(s)" in logged[0] and "10 time(s)" in logged[1]
