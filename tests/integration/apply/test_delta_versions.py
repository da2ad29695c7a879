"""The cells' versions a Delta table keeps in ``_versions`` (:mod:`cdcbridge.apply.targets.delta_versions`): the
compiled rule writes what the Python one does, and both paths read a table written by an earlier version of the job
(every versioned cell by name) and one written by this one alike, for the operations that compare versions."""

from __future__ import annotations

import random
from typing import Any

from cdcbridge.apply.core.model import ColumnValue
from cdcbridge.apply.core.policy import BadInputPolicy
from cdcbridge.apply.driver.micro_batch import MicroBatchApplier
from cdcbridge.apply.spark.batch import SparkBatchApplier
from cdcbridge.apply.spark.decode import decoded_records
from cdcbridge.apply.spark.fold import COLUMNS_TYPE
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.apply.targets.delta_versions import COMMON_VERSION_KEY, ROW_VERSIONS, stored_versions
from cdcbridge.contract import MessageFormat
from tests.unit.apply.envelopes import TABLE, delete_one, mutation, put, seq_key

from .kafka_frames import SCHEMAS, batch_frame, routing, with_pk

KEYS = [(("id", n),) for n in range(3)]
STORED_DDL = (
    "id bigint, count bigint, label string, _versions map<string,bigint>, _seq string, _deleted boolean, "
    "_source_ts bigint"
)


def test_the_compiled_rule_stores_what_the_python_rule_does(spark) -> None:
    from pyspark.sql import functions as F

    rng = random.Random(7)
    rows = []
    for _ in range(300):
        names = rng.sample(["a", "b", "c", "d"], rng.randint(0, 4))
        rows.append({name: rng.choice([None, 10, 20, 30]) for name in names})
    frame = spark.createDataFrame(
        [({name: ((None, 1, None, None, None), version) for name, version in row.items()},) for row in rows],
        f"cols {COLUMNS_TYPE}",
    )
    ROW_VERSIONS.register(spark)
    stored = [r["versions"] for r in frame.select(ROW_VERSIONS(F.col("cols")).alias("versions")).collect()]
    expected = [stored_versions({n: ColumnValue(1, v) for n, v in row.items()}) for row in rows]
    assert stored == expected
    assert any(len(versions) > 2 for versions in expected) and any(not versions for versions in expected)


class Paths:
    """The Spark path and the reference path, each into its own Delta table seeded with rows as an earlier version
    of the job wrote them: every versioned cell named in ``_versions``."""

    def __init__(self, spark: Any, root: Any) -> None:
        self.spark = spark
        mutations = routing(MessageFormat.MUTATE_LOG)
        self.target = DeltaTarget(spark, str(root / "spark"))
        self.reference = DeltaTarget(spark, str(root / "reference"))
        self.spark_path = SparkBatchApplier(self.target, mutations, "app")
        self.reference_path = MicroBatchApplier(self.reference, mutations, "app", BadInputPolicy())
        for target in (self.target, self.reference):
            path = target.create_table(TABLE, {"id": "bigint"}, {"count": "bigint", "label": "string"})
            columns = spark.read.format("delta").load(path).columns
            earlier = [(n, 7, "old", {"count": 10, "label": 10}, seq_key(10), False, 10) for n in range(len(KEYS))]
            spark.createDataFrame(earlier, STORED_DDL).select(*columns).write.format("delta").mode("append").save(path)
        self.batches = 0

    def apply(self, messages: list[dict[str, Any]]) -> dict[tuple, dict[str, ColumnValue]]:
        """Apply one batch on both paths; the Spark path's rows (each column's value and version), equal to the
        reference path's."""
        frame = batch_frame(self.spark, MessageFormat.MUTATE_LOG, list(enumerate(messages)))
        self.reference_path.apply(self.batches, decoded_records(frame, SCHEMAS))
        self.spark_path.apply(self.batches, frame, SCHEMAS)
        self.batches += 1
        rows = {pk: row.columns for pk, row in self.target.read_rows(TABLE, KEYS).items()}
        assert rows == {pk: row.columns for pk, row in self.reference.read_rows(TABLE, KEYS).items()}
        return rows

    def stored_versions(self) -> dict[int, dict[str, int | None]]:
        stored = self.spark.read.format("delta").load(self.target.path(TABLE))
        return {row["id"]: row["_versions"] for row in stored.select("id", "_versions").collect()}


def _update(seq: int, key: tuple, *cells: dict[str, Any]) -> dict[str, Any]:
    return with_pk(mutation(seq, "UPDATE", list(cells)), key)


def test_versions_of_an_earlier_table_and_of_this_one_are_compared_alike(spark, tmp_path) -> None:
    paths = Paths(spark, tmp_path)
    rows = paths.apply([
        # the held version of count is 10: deleted; a label older than the held one changes nothing
        _update(20, KEYS[0], delete_one("count", 10), put("label", "older", 5)),
        # another version of count: kept; a newer label replaces the old
        _update(20, KEYS[1], delete_one("count", 9), put("label", "new", 20)),
    ])  # fmt: skip
    assert rows[KEYS[0]] == {"label": ColumnValue("old", 10)}
    assert rows[KEYS[1]] == {"count": ColumnValue(7, 10), "label": ColumnValue("new", 20)}
    assert rows[KEYS[2]] == {"count": ColumnValue(7, 10), "label": ColumnValue("old", 10)}
    assert paths.stored_versions() == {
        0: {COMMON_VERSION_KEY: 10},
        1: {COMMON_VERSION_KEY: 20, "count": 10},
        2: {"count": 10, "label": 10},  # not written again: as the earlier job left it
    }
    # this job's compact rows: a cell's own entry, or else the row's common version, is what is compared
    rows = paths.apply([
        _update(30, KEYS[0], delete_one("label", 10)),
        _update(30, KEYS[1], delete_one("count", 10), put("label", "older", 15)),
    ])  # fmt: skip
    assert rows[KEYS[0]] == {}
    assert rows[KEYS[1]] == {"label": ColumnValue("new", 20)}
    assert paths.stored_versions()[1] == {COMMON_VERSION_KEY: 20}
