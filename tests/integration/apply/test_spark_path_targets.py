"""The Spark path writes into real Delta and PostgreSQL tables exactly what the reference path writes, for values
that are easy to get wrong on the way (extreme and non-finite doubles, -0.0, large integers, quotes, backslashes,
newlines and non-ASCII text, long binary, a binary primary key), and reads those rows back for the next batch."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

from cdcbridge.apply.core.policy import BadInputPolicy
from cdcbridge.apply.driver.micro_batch import MicroBatchApplier
from cdcbridge.apply.spark.batch import ReferencePathNeeded, SparkBatchApplier
from cdcbridge.apply.spark.decode import decoded_records
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.apply.targets.postgres import PostgresTarget
from cdcbridge.contract import MessageFormat
from tests.unit.apply.envelopes import TABLE, delete_all, delete_one, increment, mutation, put

from .interpreted import without_generated_code
from .kafka_frames import SCHEMAS, batch_frame, routing, with_pk

EDGE = {
    "big": 1e300,
    "tiny": 1.2345e-10,
    "e16": 1e16,
    "nan": math.nan,
    "inf": math.inf,
    "ninf": -math.inf,
    "negzero": -0.0,
    "count": 2**62,
    "neg": -5,
    "text": 'quote " back \\ tab \t nl \n é 中 {"json": 1}',
    "empty": "",
    "yes": True,
    "no": False,
    "blob": bytes(range(256)) * 2,
}
KEYS = [(("region", "eu"), ("tag", bytes([n, 0, 0xFF])), ("id", n)) for n in range(3)]


def batches() -> list[list[tuple[int, dict[str, Any]]]]:
    first = [(n, with_pk(mutation(10, "PUT", [put(name, value, 10) for name, value in EDGE.items()]), pk))
             for n, pk in enumerate(KEYS)]  # fmt: skip
    second = [
        (0, with_pk(mutation(20, "INCREMENT", [increment("count", 7), increment("neg", -1)]), KEYS[0])),
        (0, with_pk(mutation(21, "UPDATE", [delete_one("text", 10), put("big", -2.5e-300, 5), delete_all("blob")]),
                    KEYS[0])),
    ]  # fmt: skip
    second += [
        (1, with_pk(mutation(20, "DELETE"), KEYS[1])),
        (2, first[2][1]),  # a redelivery of batch 0: stale now
        (2, with_pk(mutation(22, "UPDATE", [put("nan", 0.5, 22), put("text", "x", 9)]), KEYS[2])),
    ]
    return [first, second]


def comparable(rows: dict) -> dict:
    """Rows with NaN made comparable."""

    def value(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and math.isnan(v) else (type(v).__name__, v)

    return {pk: (row.deleted, row.seq, row.source_ts, {n: (value(c.value), c.version) for n, c in row.columns.items()})
            for pk, row in rows.items()}  # fmt: skip


@pytest.mark.parametrize("kind", ["delta", "postgres"])
def test_both_paths_write_and_read_back_the_same_rows(spark, postgres, tmp_path, kind) -> None:
    def target(name: str) -> Any:
        if kind == "delta":
            return DeltaTarget(spark, str(tmp_path / name))
        made = PostgresTarget(postgres.dsn, schema=f"{name}{os.getpid()}")
        made.prepare([TABLE])
        return made

    reference, candidate = target("reference"), target("spark")
    check_both_paths(spark, reference, candidate)


def test_the_compiled_functions_give_the_same_rows_without_generated_code(spark, tmp_path) -> None:
    """The fold, the stored Delta rows and the summary evaluated row by row (``eval``), not by generated code."""
    with without_generated_code(spark):
        check_both_paths(
            spark, DeltaTarget(spark, str(tmp_path / "reference")), DeltaTarget(spark, str(tmp_path / "spark"))
        )


def check_both_paths(spark: Any, reference: Any, candidate: Any) -> None:
    """Both batches of :func:`batches` through the reference path into `reference` and through the Spark path
    into `candidate`: the same counts and rows after each."""
    mutations = routing(MessageFormat.MUTATE_LOG)
    reference_path = MicroBatchApplier(reference, mutations, "app", BadInputPolicy())
    spark_path = SparkBatchApplier(candidate, mutations, "app")
    for batch_id, deliveries in enumerate(batches()):
        frame = batch_frame(spark, MessageFormat.MUTATE_LOG, deliveries)
        expected = reference_path.apply(batch_id, decoded_records(frame, SCHEMAS))
        actual = spark_path.apply(batch_id, frame, SCHEMAS)
        assert (actual.stats, actual.rows_written) == (expected.stats, expected.rows_written)
        assert comparable(candidate.read_rows(TABLE, KEYS)) == comparable(reference.read_rows(TABLE, KEYS))
    rows = candidate.read_rows(TABLE, KEYS)
    assert rows[KEYS[0]].columns["count"].value == 2**62 + 7 and rows[KEYS[1]].deleted
    assert "text" not in rows[KEYS[0]].columns and rows[KEYS[2]].columns["text"].value == EDGE["text"]
    assert rows[KEYS[2]].columns["big"].value == 1e300 and rows[KEYS[2]].columns["blob"].value == EDGE["blob"]
    for made in (reference, candidate):
        made.close()


@pytest.mark.parametrize(
    ("key", "cells", "reason"),
    [
        (KEYS[1], [put("count", "seven", 11)], r"column 'count' \(string\) does not match the table's"),
        (KEYS[1], [put("Label", 1, 11), put("label", 2, 11)], "differ only in case"),
        ((("region", "eu"), ("tag", "text"), ("id", 1)), [put("count", 1, 11)], "primary keys .* differ"),
    ],
)
def test_rows_the_delta_table_would_refuse_go_to_the_reference_path_unwritten(spark, tmp_path, key, cells, reason):
    """The per-table summary (RowShape.java) sees each changed row's column types, key types and case clashes."""
    target = DeltaTarget(spark, str(tmp_path / "t"))
    spark_path = SparkBatchApplier(target, routing(MessageFormat.MUTATE_LOG), "app")
    first = [(0, with_pk(mutation(10, "PUT", [put("count", 1, 10), put("ratio", 0.5, 10)]), KEYS[0]))]
    report = spark_path.apply(0, batch_frame(spark, MessageFormat.MUTATE_LOG, first), SCHEMAS)
    assert report.rows_written == 1
    refused = [(0, with_pk(mutation(11, "UPDATE", cells), key))]
    with pytest.raises(ReferencePathNeeded, match=reason):
        spark_path.apply(1, batch_frame(spark, MessageFormat.MUTATE_LOG, refused), SCHEMAS)
    assert target.read_marker(TABLE, "app").batch_id == 0
    assert set(target.read_rows(TABLE, [KEYS[0], KEYS[1]])) == {KEYS[0]}
    target.close()
