"""The first-load stream and the trickle's writes, reader and arithmetic of the apply benchmark."""

from __future__ import annotations

from cdcbridge.formats.keys import decode_key
from cdcbridge.harness.bench.apply_first_load import initial_fill, median_of_rounds
from cdcbridge.harness.bench.apply_trickle import DeltaPoller, _quantiles, first_seen_after, trickle


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


def test_a_trickle_writes_each_id_once_with_its_own_value_until_the_ids_run_out() -> None:
    calls: list[tuple[int, int]] = []
    written = trickle(lambda row_id, n: calls.append((row_id, n)), [7, 3, 5], 100, seconds=60, interval=0.0)
    assert calls == [(7, 100), (3, 101), (5, 102)]
    assert list(written) == calls
    assert list(written.values()) == sorted(written.values())


def test_a_trickle_stops_after_its_time() -> None:
    calls: list[tuple[int, int]] = []
    written = trickle(lambda row_id, n: calls.append((row_id, n)), range(1, 1000), 1, seconds=0.05, interval=0.02)
    assert 1 <= len(calls) <= 4 and list(written) == calls
    assert calls[0] == (1, 1)


def test_the_kafka_leg_of_an_update_starts_at_its_write_not_at_the_row_insert() -> None:
    written = {(1, 1): 10.0, (1, 1_000_000): 20.0, (2, 1_000_001): 21.0}
    sent = {1: [10.25, 20.5], 2: [11.0]}  # id 2's update never reached Kafka
    assert first_seen_after(written, sent) == [0.25, 0.5]


def test_the_poller_sees_an_updated_value_only_when_its_version_is_readable(tmp_path) -> None:
    from arro3.core import Array, DataType, Table
    from deltalake import write_deltalake

    def rows(ids: list[int], ns: list[int | None]) -> Table:
        return Table.from_pydict({"id": Array(ids, DataType.int64()), "n": Array(ns, DataType.int64())})

    path = tmp_path / "t"
    poller = DeltaPoller(path, poll=1.0)
    poller.check()
    assert poller.seen == {}
    write_deltalake(str(path), rows([1, 2], [1, None]))
    poller.check()
    assert set(poller.seen) == {(1, 1)}
    first = poller.seen[(1, 1)]
    write_deltalake(str(path), rows([1, 2], [1_000_000, 2]), mode="overwrite")
    poller.check()
    assert set(poller.seen) == {(1, 1), (1, 1_000_000), (2, 2)}
    assert poller.seen[(1, 1)] == first


def test_first_loads_of_several_rounds_report_the_median_ratio_and_its_spread() -> None:
    rounds = [
        {"rows": 10, "batches": 2, "rows_per_s": 50, "plain_rows_per_s": 70, "ratio": 0.71},
        {"rows": 10, "batches": 2, "rows_per_s": 60, "plain_rows_per_s": 65, "ratio": 0.92},
        {"rows": 10, "batches": 2, "rows_per_s": 55, "plain_rows_per_s": 68, "ratio": 0.81},
    ]
    assert median_of_rounds(rounds) == {
        "rows": 10, "batches": 2, "rows_per_s": 55, "plain_rows_per_s": 68, "ratio": 0.81,
        "ratio_lowest": 0.71, "ratio_highest": 0.92, "rounds": 3,
    }  # fmt: skip
    failed = median_of_rounds([{**rounds[0], "rows_per_s": None, "ratio": None}])
    assert (failed["ratio"], failed["rows_per_s"], failed["ratio_lowest"]) == (None, None, None)
