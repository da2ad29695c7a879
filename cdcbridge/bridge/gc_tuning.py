"""Cycle-collector settings for the long-running, allocation-heavy processes (bridge workers, snapshot export).

The bridge makes millions of short-lived objects (records, cells, callbacks) and almost no reference cycles, while
the SDK, protobuf and pydantic leave hundreds of thousands of long-lived objects behind at start-up. With CPython's
default thresholds the collector keeps re-scanning those, a large share of a worker's CPU. Freezing what start-up
created and collecting the young generation less often removes nearly all of that; cycles are still collected,
only later.
"""

from __future__ import annotations

import gc

#: Net container allocations between young-generation collections (CPython's default is 700).
YOUNG_THRESHOLD = 50_000
#: Young collections per middle-generation collection, and middle per full (CPython: 10 and 10).
OLDER_THRESHOLDS = (20, 20)


def tune_for_throughput() -> tuple[int, int, int]:
    """Move every object alive now out of the collector's reach (gc.freeze) and raise the young threshold; returns
    the previous thresholds. Call once, after start-up, before the hot loop."""
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    return previous
