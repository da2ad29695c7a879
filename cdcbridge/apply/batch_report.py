"""What one micro-batch did, on either path (driver or Spark), and the freshness sample it keeps."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from cdcbridge.apply.core.fold import ApplyStats


@dataclass(slots=True)
class BatchReport:
    """What one micro-batch did (added up over a run in the job summary).

    ``spark_batches`` counts batches applied on Spark (:mod:`.spark.batch`), ``new_key_batches`` of them folded message
    by message because no key repeated or was stored (:mod:`.spark.new_keys`); the others took the driver path,
    ``small_batches`` of them because they were small (``apply.small_batch_max_messages``), and ``driver_fetches`` of
    those read from Kafka by the driver itself rather than a Spark job. Phases: on this path decode = read (collect, or
    the driver's own read) + validate, read = target rows, fold, write; on Spark, decode = planning the batch's decoding
    and grouping, read = fetching the target's rows where that is a step of its own (PostgreSQL; Delta reads inside the
    fold), fold = the job that reads, decodes, validates, groups, joins and folds plus the per-table summary and checks,
    write = the target's write. ``rows_by_table``: rows handed to the target; ``source_ts_sample``: a few quantiles of
    the written rows' source commit times (ms), for the freshness metric (a batch's own, not added up).
    """

    batches: int = 0
    batches_skipped: int = 0
    spark_batches: int = 0
    new_key_batches: int = 0
    small_batches: int = 0
    driver_fetches: int = 0
    tables_skipped: int = 0
    rows_written: int = 0
    other_format: int = 0
    tombstones_unknown_table: int = 0
    seconds_decode: float = 0.0
    seconds_read: float = 0.0
    seconds_fold: float = 0.0
    seconds_write: float = 0.0
    stats: ApplyStats = field(default_factory=ApplyStats)
    rows_by_table: dict[str, int] = field(default_factory=dict)
    source_ts_sample: tuple[int, ...] = ()

    def __iadd__(self, other: BatchReport) -> BatchReport:
        for item in fields(self):
            if item.name == "rows_by_table":
                for table, count in other.rows_by_table.items():
                    self.rows_by_table[table] = self.rows_by_table.get(table, 0) + count
            elif item.name != "source_ts_sample":
                setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))
        return self

    def as_dict(self) -> dict[str, int | float]:
        figures = {item.name: getattr(self, item.name) for item in fields(self) if item.name not in _NOT_FIGURES}
        figures.update({item.name: getattr(self.stats, item.name) for item in fields(self.stats)})
        return figures


_NOT_FIGURES = ("stats", "rows_by_table", "source_ts_sample")
#: Quantiles of the written rows' source commit times kept as the batch's freshness sample.
FRESHNESS_QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


def quantiles(values: list[int], points: tuple[float, ...] = FRESHNESS_QUANTILES) -> tuple[int, ...]:
    """Nearest-rank quantiles of `values` (empty: none)."""
    if not values:
        return ()
    ordered = sorted(values)
    return tuple(ordered[min(len(ordered) - 1, int(point * len(ordered)))] for point in points)
