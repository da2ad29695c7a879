"""The bridge's answer to trimmed stream data, per table (`source.tables[].on_trimmed`).

`resnapshot` (the default) requests an incremental snapshot of the whole table (cdcbridge.bridge.trim_repair: the
stream API does not tell a shard's key range) and continues from the oldest retained record, loudly: an ERROR names
the shard, the lost range and the snapshot that repairs it; the workers run the snapshot
(`snapshot.incremental.run_in_workers`), so the target converges to the source. If the request cannot be written,
the shard halts and asks again. `continue` resumes after the gap (the loss is logged as an ERROR and counted in
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
from cdcbridge.snapshot.errors import SnapshotError

#: Requests the repairing snapshot of one trim: (its id, whether this call requested it).
RequestRepair = Callable[[TrimmedRead], tuple[str, bool]]

log = logging.getLogger(__name__)


class TableTrimPolicy:
    """The trim policy of one table's coordination worker."""

    def __init__(
        self, table: str, mode: OnTrimmed, worker_id: str, snapshot_start_us: Callable[[], int | None],
        request_repair: RequestRepair | None = None, *, workers_run_snapshots: bool = True,
    ) -> None:  # fmt: skip
        """`snapshot_start_us`: the stream start (µs) of the table's finished snapshot, None without one;
        `request_repair`: needed for `resnapshot`."""
        if mode is OnTrimmed.RESNAPSHOT and request_repair is None:
            raise ValueError(f"table {table}: on_trimmed: resnapshot needs a way to request snapshots")
        self._table = table
        self._mode = mode
        self._worker_id = worker_id
        self._snapshot_start_us = snapshot_start_us
        self._request_repair = request_repair
        self._workers_run_snapshots = workers_run_snapshots
        self._stops: dict[str, int] = {}

    def decide(self, trimmed: TrimmedRead) -> TrimDecision:
        if self._mode is OnTrimmed.CONTINUE:
            return TrimDecision.CONTINUE
        if self._mode is OnTrimmed.RESNAPSHOT:
            return self._resnapshot(trimmed)
        if self._covered_by_snapshot(trimmed):
            log.warning(
                "table %s shard %s: records after its checkpoint were trimmed, but a snapshot of the table taken "
                "after that checkpoint holds their changes; continuing from the oldest retained record",
                self._table, trimmed.shard_id,
            )  # fmt: skip
            return TrimDecision.CONTINUE_REPAIRED
        stops = self._stops[trimmed.shard_id] = self._stops.get(trimmed.shard_id, 0) + 1
        if stops == 1 or stops % 10 == 0:  # the halted shard asks again every retry: log the first and every tenth
            log.error("%s", self.stop_message(trimmed))
        return TrimDecision.STOP

    def _resnapshot(self, trimmed: TrimmedRead) -> TrimDecision:
        assert self._request_repair is not None
        try:
            snapshot_id, requested = self._request_repair(trimmed)
        except SnapshotError as error:  # the status table unreachable: halt, ask again on the next retry
            stops = self._stops[trimmed.shard_id] = self._stops.get(trimmed.shard_id, 0) + 1
            if stops == 1 or stops % 10 == 0:
                log.error("table %s shard %s (owner %s): the stream's retention trimmed %s, and the incremental "
                          "snapshot that repairs them cannot be requested (%s); the shard waits at its checkpoint "
                          "and asks again", self._table, trimmed.shard_id, self._worker_id, trimmed.lost_range(),
                          error)  # fmt: skip
            return TrimDecision.STOP
        self._stops.pop(trimmed.shard_id, None)
        since = ""
        if trimmed.checkpoint_seq is not None:
            since = f" (committed after {format_time_us(trimmed.checkpoint_seq.sequence.timestamp_us)})"
        runs = "the workers run it"
        if not self._workers_run_snapshots:
            runs = "snapshot.incremental.run_in_workers is false: run it with `cdcbridge snapshot run-pending`"
        log.error(
            "DATA LOST BY TRIM, repaired by incremental snapshot %s: shard %s of table %s (owner %s): the stream's "
            "retention trimmed %s%s before they were read. The shard continues from the oldest retained record "
            "(on_trimmed: resnapshot); snapshot %s (%s) re-reads the whole table (a shard's key range is not known "
            "from the stream API), so the target gets every lost change; %s. To keep it from happening again: add "
            "workers, check the target and Kafka, or raise the stream's expiration.",
            snapshot_id, trimmed.shard_id, self._table, self._worker_id, trimmed.lost_range(), since, snapshot_id,
            "requested now" if requested else "already requested", runs,
        )  # fmt: skip
        return TrimDecision.CONTINUE_REPAIRED

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
