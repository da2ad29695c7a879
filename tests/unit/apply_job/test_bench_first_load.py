"""The first-load stream and the trickle's arithmetic of the apply benchmark."""

from __future__ import annotations

from cdcbridge.formats.keys import decode_key
from cdcbridge.harness.bench.apply_first_load import initial_fill
from cdcbridge.harness.bench.apply_trickle import _quantiles


def test_the_initial_fill_puts_every_row_once_in_a_shuffled_order() -> None:
    messages = [m for m in initial_fill("t", rows=50, prefix="p", seed=3) if m.topic.endswith(".mutation")]
    ids = [decode_key(m.key)[-1] for m in messages]
    assert sorted(ids) == list(range(50)) and ids != sorted(ids)
    assert {m.value["type"] for m in messages if m.value is not None} == {"PUT"}
    seqs = [m.value["seq"]["seq_key"] for m in messages if m.value is not None]
    assert seqs == sorted(seqs) and len(set(seqs)) == 50


def test_the_trickle_reports_median_p95_and_max() -> None:
    assert _quantiles([float(n) for n in range(1, 21)]) == {"p50_s": 10.5, "p95_s": 20.0, "max_s": 20.0}
    assert _quantiles([]) == {"p50_s": None, "p95_s": None, "max_s": None}
