"""Stream-record decode benchmark: how many records per second `decode_stream_record` turns into ChangeRecords.

Records look like a typical wide-ish table: a (string, int) primary key and 10 attribute cells of mixed types,
each with a millisecond version, as PutRow produces them in a stream.
"""

from __future__ import annotations

import platform
import random
import time
from collections.abc import Callable

from cdcbridge.tablestore.plainbuffer import IMPLEMENTATION, PlainCell, encode_row
from cdcbridge.tablestore.records import decode_stream_record, decode_stream_record_python

#: Distinct records generated; longer runs cycle through them (decoding cost does not depend on repetition).
MAX_UNIQUE_RECORDS = 20_000
PUT_ROW = 1
ROUNDS = 3


def make_record(rng: random.Random, index: int) -> bytes:
    """One realistic PUT_ROW stream record."""
    ts = 1_700_000_000_000 + index
    cells = [
        PlainCell("order_count", rng.randrange(0, 1_000_000), None, ts),
        PlainCell("view_count", rng.randrange(0, 1 << 40), None, ts),
        PlainCell("version", rng.randrange(1, 100), None, ts),
        PlainCell("amount", rng.uniform(0, 10_000), None, ts),
        PlainCell("ratio", rng.random(), None, ts),
        PlainCell("status", rng.choice(("NEW", "PAID", "SHIPPED", "CANCELLED")), None, ts),
        PlainCell("region", rng.choice(("cn-hangzhou", "eu-central-1", "us-west-1")), None, ts),
        PlainCell("label", f"label-{rng.randrange(10_000):04d}", None, ts),
        PlainCell("is_active", rng.random() < 0.5, None, ts),
        PlainCell("payload", rng.randbytes(100), None, ts),
    ]
    primary_key = [("user_id", f"user-{rng.randrange(10**9):09d}"), ("event_seq", index)]
    return encode_row(primary_key, cells, sequence=(1, ts * 1000, index % 7))


def _decoder(implementation: str) -> tuple[str, Callable[..., object]]:
    if implementation == "auto":
        implementation = IMPLEMENTATION
    if implementation == "python":
        return "python", decode_stream_record_python
    if implementation == "c":
        if IMPLEMENTATION != "c":
            raise ValueError(
                "the C accelerator is not available (not built, or CDCBRIDGE_PURE_PYTHON is set); "
                "reinstall with a C compiler present (pip install -e .) or use implementation='python'"
            )
        return "c", decode_stream_record
    raise ValueError(f"implementation must be 'auto', 'c' or 'python', got {implementation!r}")


def run_decode_bench(
    records: int = 200_000, check_crc: bool = False, seed: int = 0, implementation: str = "auto"
) -> dict:
    """Decode `records` stream records (best of 3 timed passes) and report rows per second.

    `implementation`: "auto" (what the bridge uses), "c" (the accelerator) or "python" (the fallback).
    """
    if records <= 0:
        raise ValueError(f"records must be positive, got {records}")
    used, decode = _decoder(implementation)
    rng = random.Random(seed)
    pool = [make_record(rng, i) for i in range(min(records, MAX_UNIQUE_RECORDS))]
    batch = [pool[i % len(pool)] for i in range(records)]
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for index, data in enumerate(batch):
            decode(data, PUT_ROW, table="bench", shard_id="shard-0", record_index=index, check_crc=check_crc)
        best = min(best, time.perf_counter() - started)
    return {
        "rows_per_s": round(records / best),
        "records": records,
        "check_crc": check_crc,
        "implementation": used,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "seconds": round(best, 4),
        "unique_records": len(pool),
        "avg_record_bytes": round(sum(len(r) for r in pool) / len(pool), 1),
        "seed": seed,
    }
