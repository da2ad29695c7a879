"""The bridge's answer to trimmed stream data, per table (`source.tables[].on_trimmed`).

`continue` resumes after the gap (the loss is logged as an ERROR and counted in
cdcbridge_trimmed_data_events_total). `stop` halts the shard at its checkpoint with an error naming the shard, the
table, the lost range and the fix; the shard lets itself go once a finished snapshot of the table started after the
shard's checkpoint (its rows then hold every change the lost records made, and the processor skips the records the
snapshot covers), so the fix is: stop the workers, export the table with `cdcbridge snapshot`, start them again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cdcbridge.changes import format_time_us
from cdcbridge.config import OnTrimmed
from cdcbridge.coordination.trim_policy import TrimDecision, TrimmedRead

log = logging.getLogger(__name__)


class TableTrimPolicy:
    """The trim policy of one table's coordination worker."""

    def __init__(
        self, table: str, mode: OnTrimmed, worker_id: str, snapshot_start_us: Callable[[], int | None]
    ) -> None:
        """`snapshot_start_us`: the stream start (µs) of the table's finished snapshot, None without one."""
        if mode is OnTrimmed.RESNAPSHOT:  # refused by the configuration already; never pretend to do it
            raise ValueError(f"table {table}: on_trimmed: resnapshot needs incremental snapshots (not built yet)")
        self._table = table
        self._mode = mode
        self._worker_id = worker_id
        self._snapshot_start_us = snapshot_start_us
        self._stops: dict[str, int] = {}

    def decide(self, trimmed: TrimmedRead) -> TrimDecision:
        if self._mode is OnTrimmed.CONTINUE:
            return TrimDecision.CONTINUE
        if self._covered_by_snapshot(trimmed):
            log.warning(
                "table %s shard %s: records after its checkpoint were trimmed, but a snapshot of the table taken "
                "after that checkpoint holds their changes; continuing from the oldest retained record",
                self._table, trimmed.shard_id,
            )  # fmt: skip
            return TrimDecision.CONTINUE
        stops = self._stops[trimmed.shard_id] = self._stops.get(trimmed.shard_id, 0) + 1
        if stops == 1 or stops % 10 == 0:  # the halted shard asks again every retry: log the first and every tenth
            log.error("%s", self.stop_message(trimmed))
        return TrimDecision.STOP

    def _covered_by_snapshot(self, trimmed: TrimmedRead) -> bool:
        try:
            start_us = self._snapshot_start_us()
        except Exception as error:  # a running snapshot, or the status table unreachable: stay halted
            log.info("table %s: cannot tell whether a snapshot covers the trimmed records: %s", self._table, error)
            return False
        if start_us is None:
            return False
        return trimmed.checkpoint_seq is None or start_us > trimmed.checkpoint_seq.sequence.timestamp_us

    def stop_message(self, trimmed: TrimmedRead) -> str:
        """The halt error: what was lost, where, and what to do."""
        since = ""
        if trimmed.checkpoint_seq is not None:
            since = f" (committed after {format_time_us(trimmed.checkpoint_seq.sequence.timestamp_us)})"
        return (
            f"DATA LOST BY TRIM, shard halted: shard {trimmed.shard_id} of table {self._table} (owner "
            f"{self._worker_id}): the stream's retention trimmed {trimmed.lost_range()}{since} before they were read. "
            f"The shard stays at its checkpoint and produces nothing (on_trimmed: stop). To fix: stop the bridge "
            f"workers, run `cdcbridge snapshot` for table {self._table} so the target gets the rows again, then "
            f"start the workers: a snapshot newer than the checkpoint lets the shard continue. To accept the loss "
            f"instead, set on_trimmed: continue for the table and restart. To keep it from happening again: add "
            f"workers, check the target and Kafka, or raise the stream's expiration."
        )
