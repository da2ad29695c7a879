"""The apply benchmark's floor rewrites the Delta table with each key's last message of the batch, keeps the rows of
other keys, and commits with the batch's txn marker (so the figure times a real whole-table rewrite)."""

from __future__ import annotations

from typing import Any

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.spark.operations import VALUE_UNION
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.contract import MessageFormat
from cdcbridge.formats.keys import encode_key
from cdcbridge.harness.bench.apply_floor import rewrite_with_last_messages
from tests.unit.apply.envelopes import mutation, put

from .kafka_frames import SCHEMAS, batch_frame, with_pk


def _put(seq: int, key: int) -> dict[str, Any]:
    return with_pk(mutation(seq, "PUT", [put("count", seq, seq)]), (("id", key),))


def _rows(spark: Any, path: str) -> dict[bytes, int]:
    table = spark.read.format("delta").load(path).selectExpr("key", f"cast(cells[0].value AS {VALUE_UNION}).l AS n")
    return {bytes(row["key"]): row["n"] for row in table.collect()}


def test_the_floor_keeps_each_keys_last_message_and_the_rows_of_other_keys(spark: Any, tmp_path: Any) -> None:
    from delta.tables import DeltaTable

    path = str(tmp_path / "floor")
    first = [_put(1, 1), _put(2, 2), _put(3, 1)]  # key 1 twice: its later message wins
    assert rewrite_with_last_messages(batch_frame(spark, MessageFormat.MUTATE_LOG, list(enumerate(first))), SCHEMAS,
                                      path, "bench", 0) == 3  # fmt: skip
    assert _rows(spark, path) == {encode_key([1]): 3, encode_key([2]): 2}
    second = [_put(4, 2), _put(5, 3), _put(6, 2)]
    assert rewrite_with_last_messages(batch_frame(spark, MessageFormat.MUTATE_LOG, list(enumerate(second))), SCHEMAS,
                                      path, "bench", 1) == 3  # fmt: skip
    assert _rows(spark, path) == {encode_key([1]): 3, encode_key([2]): 6, encode_key([3]): 5}
    history = DeltaTable.forPath(spark, path).history(1).select("operation").first()
    assert history is not None and history["operation"] == "WRITE"
    assert DeltaTarget(spark, str(tmp_path)).read_marker("floor", "bench") == BatchMarker("bench", 1)
