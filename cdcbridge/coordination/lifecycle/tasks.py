"""One task per consumer state (KCL BlockOnParentShardTask, InitializeTask, ProcessTask, ShutdownTask).

A task runs on the shard pool, does one bounded step and reports a TaskOutcome; it never sleeps (the consumer
schedules the retry) and never raises (failures become outcomes).
"""

from __future__ import annotations

import logging

from cdcbridge.coordination.checkpoint.checkpointer import ShardCheckpointer
from cdcbridge.coordination.checkpoint.positions import TRIM_HORIZON, is_iterator
from cdcbridge.coordination.errors import (
    InvalidPositionError,
    LeaseLostError,
    LeaseStoreError,
    ProcessorNotReadyError,
    ShardNotFoundError,
    StreamError,
    StreamUnavailableError,
    TrimmedDataError,
)
from cdcbridge.coordination.lifecycle.incarnation import Incarnation, ShardContext
from cdcbridge.coordination.lifecycle.states import ConsumerState, TaskOutcome
from cdcbridge.coordination.processor import (
    InitializationInput,
    ProcessRecordsInput,
    ShutdownInput,
    ShutdownReason,
)
from cdcbridge.coordination.stats import CheckpointCountingStore
from cdcbridge.coordination.stream.read_ahead import PageReader
from cdcbridge.coordination.trim_policy import TrimDecision, TrimmedRead

log = logging.getLogger(__name__)


#: Upper bound of the back-off between reads that keep failing with a non-transient error.
MAX_READ_RETRY_SECONDS = 60.0

#: How often a shard halted by its trim policy reads again (and asks the policy again).
HALTED_RETRY_SECONDS = 30.0


def _backoff(ctx: ShardContext) -> float:
    return ctx.settings.task_retry_backoff_seconds


class BlockOnParentsTask:
    """WAITING_ON_PARENTS: a child emits nothing until every parent's lease says SHARD_END (I4).

    Stricter than the Java client and KCL: a parent lease that is missing while the parent shard is still listed
    blocks (and forces a shard sync), it does not count as done. A parent that is no longer listed (its data expired)
    no longer blocks; that is counted as an unread-parent event.
    """

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx

    def run(self) -> TaskOutcome:
        ctx = self._ctx
        blocked_on: list[str] = []
        force_sync = False
        for parent_id in ctx.held.lease.parent_shard_ids:
            try:
                parent = ctx.store.get_lease(ctx.stream_id, parent_id)
            except LeaseStoreError as exc:
                log.warning("shard %s: cannot read parent lease %s: %s", ctx.shard_id, parent_id, exc)
                return TaskOutcome(retry_after=_backoff(ctx))
            if parent is not None and parent.is_finished:
                continue
            gone = self._parent_gone(parent_id)
            if gone is True:
                ctx.stats.add("unread_parent_events")
                log.warning(
                    "shard %s: parent %s is no longer listed and its lease %s; not waiting for it (its unread data, "
                    "if any, expired)",
                    ctx.shard_id,
                    parent_id,
                    "is missing" if parent is None else f"ends at {parent.checkpoint!r}",
                )
                continue
            blocked_on.append(parent_id)
            if parent is None or gone is None:
                force_sync = True
        if blocked_on:
            log.debug("shard %s waits for parents %s", ctx.shard_id, blocked_on)
            return TaskOutcome(retry_after=ctx.settings.parent_poll_interval_seconds, force_sync=force_sync)
        return TaskOutcome(next_state=ConsumerState.INITIALIZING)

    def _parent_gone(self, parent_id: str) -> bool | None:
        """True if the latest listing shows this child but not the parent (a parent always predates its child,
        so it expired); False if the parent is listed; None if the listing cannot tell (stale or missing)."""
        listed = self._ctx.listed_shards()
        if listed is None or self._ctx.shard_id not in listed:
            return None
        return parent_id not in listed


class InitializeTask:
    """INITIALIZING: resolve the fetch position from the stored checkpoint and initialise a fresh processor."""

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx

    def run(self) -> TaskOutcome:
        ctx = self._ctx
        lease = ctx.held.lease
        if lease.is_finished:
            return TaskOutcome(shutdown=ShutdownReason.SHARD_END)
        gone = False
        cursor: str | None = lease.checkpoint if is_iterator(lease.checkpoint) else None
        if cursor is None:
            try:
                cursor = ctx.stream.get_shard_iterator(ctx.stream_id, ctx.shard_id)
            except ShardNotFoundError:
                gone = True
            except StreamError as exc:
                log.warning("shard %s: cannot get a shard iterator: %s", ctx.shard_id, exc)
                return TaskOutcome(retry_after=_backoff(ctx))
        progress = ctx.stats.shard(ctx.shard_id)
        progress.restarted(lease.checkpoint_seq)
        store = CheckpointCountingStore(ctx.store, progress)  # checkpoints counted per shard, for metrics
        checkpointer = ShardCheckpointer(ctx.held, store, ctx.clock, ctx.stats, lease.checkpoint_seq)
        try:
            processor = ctx.processor_factory()
            processor.initialize(
                InitializationInput(
                    stream_id=ctx.stream_id,
                    shard_id=ctx.shard_id,
                    parent_shard_ids=lease.parent_shard_ids,
                    checkpoint=lease.checkpoint or TRIM_HORIZON,
                    checkpoint_sequence=lease.checkpoint_seq,
                )
            )
        except ProcessorNotReadyError as exc:
            level = logging.DEBUG if ctx.not_ready_logged.is_set() else logging.INFO
            ctx.not_ready_logged.set()
            log.log(level, "shard %s: the record processor is not ready, retrying every %.0fs: %s", ctx.shard_id,
                    _backoff(ctx), exc)  # fmt: skip
            checkpointer.close("processor not ready")
            return TaskOutcome(retry_after=_backoff(ctx))
        except Exception:
            log.exception("shard %s: the record processor failed to initialize", ctx.shard_id)
            ctx.stats.add("processor_failures")
            checkpointer.close("processor failed to initialize")
            return TaskOutcome(retry_after=_backoff(ctx))
        ctx.not_ready_logged.clear()
        pages = PageReader(ctx.stream, ctx.read_ahead)
        incarnation = Incarnation(processor, checkpointer, cursor, lease.checkpoint_seq, pages)
        if gone:
            return _shard_gone(ctx, incarnation)
        return TaskOutcome(next_state=ConsumerState.PROCESSING, incarnation=incarnation)


class ProcessTask:
    """PROCESSING: one GetStreamRecord and one process_records call; the fetch cursor moves, the commit does not."""

    def __init__(self, ctx: ShardContext, incarnation: Incarnation) -> None:
        self._ctx = ctx
        self._inc = incarnation

    def run(self) -> TaskOutcome:
        ctx, inc = self._ctx, self._inc
        if not ctx.lease_is_fresh():
            return TaskOutcome(shutdown=ShutdownReason.LEASE_LOST)
        cursor = inc.fetch_cursor
        if cursor is None:
            return TaskOutcome(shutdown=ShutdownReason.SHARD_END)
        try:
            batch = inc.pages.read(cursor, ctx.settings.max_records)
        except TrimmedDataError as exc:
            return self._recover_from_trim(exc)
        except ShardNotFoundError:
            return _shard_gone(ctx, inc)
        except InvalidPositionError as exc:
            if cursor == ctx.held.lease.checkpoint:
                return self._recover_from_invalid_position(exc)
            return self._read_failed(exc)
        except StreamUnavailableError as exc:
            log.warning("shard %s: reading records failed, retrying: %s", ctx.shard_id, exc)
            return TaskOutcome(retry_after=_backoff(ctx))
        except StreamError as exc:
            return self._read_failed(exc)
        inc.read_failures = 0
        for record in batch.records:
            record.shard_id = record.shard_id or ctx.shard_id  # iterators are opaque: the adapter may not know it
        point = inc.resume_point
        records = batch.records if point is None else [r for r in batch.records if not point.covers(r.sequence)]
        ctx.stats.shard(ctx.shard_id).read(len(batch.records), records)
        if records:
            if not ctx.lease_is_fresh():  # self-fence right before handing records out (I5)
                return TaskOutcome(shutdown=ShutdownReason.LEASE_LOST)
            inc.checkpointer.hand_out(cursor, batch.next_iterator, records)
            try:
                inc.processor.process_records(ProcessRecordsInput(records, inc.checkpointer, point))
            except Exception:
                log.exception("shard %s: process_records failed; restarting from the stored checkpoint", ctx.shard_id)
                return TaskOutcome(shutdown=ShutdownReason.FAILED)
        else:
            inc.checkpointer.hand_out(cursor, batch.next_iterator, [])
        inc.fetch_cursor = batch.next_iterator
        if batch.next_iterator is None:
            return TaskOutcome(shutdown=ShutdownReason.SHARD_END)
        if not batch.records:
            try:
                inc.processor.on_idle()
            except Exception:
                log.exception("shard %s: on_idle failed; restarting from the stored checkpoint", ctx.shard_id)
                return TaskOutcome(shutdown=ShutdownReason.FAILED)
            return TaskOutcome(retry_after=ctx.settings.idle_fetch_interval_seconds)
        return TaskOutcome()

    def _read_failed(self, exc: StreamError) -> TaskOutcome:
        """A read that will not work by merely retrying (a corrupt record, a refused request): the shard stays at its
        checkpoint (nothing skipped) and retries with a growing back-off, logging the first failure and every tenth."""
        ctx, inc = self._ctx, self._inc
        inc.read_failures += 1
        if inc.read_failures == 1 or inc.read_failures % 10 == 0:
            log.error(
                "shard %s: reading records failed %d time(s) in a row; it stays at its checkpoint and retries: %s",
                ctx.shard_id,
                inc.read_failures,
                exc,
            )
        delay = _backoff(ctx) * 2 ** min(inc.read_failures - 1, 16)
        return TaskOutcome(retry_after=min(delay, MAX_READ_RETRY_SECONDS))

    def _recover_from_invalid_position(self, exc: InvalidPositionError) -> TaskOutcome:
        """The stored Checkpoint iterator is unusable (edited by hand): re-read from the oldest retained record,
        skipping records up to the stored CheckpointSeq, so nothing confirmed is lost and nothing is skipped."""
        ctx, inc = self._ctx, self._inc
        log.error(
            "shard %s: the stored checkpoint iterator of its lease row cannot be used (%s); re-reading from the oldest "
            "retained record%s",
            ctx.shard_id,
            exc,
            f", skipping records up to CheckpointSeq {inc.resume_point.sequence.to_text()}"
            if inc.resume_point is not None
            else " (records already delivered are sent again)",
        )
        return self._read_from_oldest("re-read")

    def _recover_from_trim(self, exc: TrimmedDataError) -> TaskOutcome:
        """Ask the trim policy: CONTINUE counts the loss, logs where and resumes from the oldest retained record
        (§5.4, T10); CONTINUE_REPAIRED does the same without calling it a loss; STOP halts the shard at its
        checkpoint (see _halt)."""
        ctx, inc = self._ctx, self._inc
        last = inc.checkpointer.last_checkpoint
        trimmed = TrimmedRead(ctx.stream_id, ctx.shard_id, last)
        try:
            decision = ctx.trim_policy.decide(trimmed)
        except Exception:
            log.exception("shard %s: the trim policy failed; the shard stays at its checkpoint", ctx.shard_id)
            decision = TrimDecision.STOP
        if decision is TrimDecision.STOP:
            return self._halt(trimmed)
        if inc.halted_reads:
            log.warning("shard %s: the trim policy now lets the shard continue after %d halted read(s)",
                        ctx.shard_id, inc.halted_reads)  # fmt: skip
            inc.halted_reads = 0
            ctx.stats.shard(ctx.shard_id).set_halted(False)
        ctx.stats.add("trimmed_data_events")
        ctx.stats.shard(ctx.shard_id).trimmed()
        position = (ctx.shard_id, ctx.held.lease.checkpoint, last.to_text() if last else "-", exc)
        if decision is TrimDecision.CONTINUE_REPAIRED:
            log.warning("shard %s: data at the read position expired before it was read (checkpoint %r, sequence "
                        "%s): %s; the trim policy repairs it (its own log line says how); resuming from the oldest "
                        "retained record", *position)  # fmt: skip
        else:
            log.error("DATA LOSS shard %s: data at the read position expired before it was read (checkpoint %r, "
                      "sequence %s): %s; resuming from the oldest retained record", *position)  # fmt: skip
        return self._read_from_oldest("post-trim")

    def _halt(self, trimmed: TrimmedRead) -> TaskOutcome:
        """The shard stays at its checkpoint and keeps its lease (a peer taking it would only halt too); it reads
        again every HALTED_RETRY_SECONDS so the policy can let it go, and logs the first refusal and every tenth."""
        ctx, inc = self._ctx, self._inc
        inc.halted_reads += 1
        if inc.halted_reads == 1:
            ctx.stats.add("halted_shards")
            ctx.stats.shard(ctx.shard_id).set_halted(True)
        if inc.halted_reads == 1 or inc.halted_reads % 10 == 0:
            log.warning("shard %s halted by its trim policy (%d read(s) refused; the policy logs why and the fix): "
                        "%s are lost", ctx.shard_id, inc.halted_reads, trimmed.lost_range())  # fmt: skip
        return TaskOutcome(retry_after=HALTED_RETRY_SECONDS)

    def _read_from_oldest(self, what: str) -> TaskOutcome:
        """Move the fetch cursor to the shard's oldest retained record and store it as the resume position; the
        CheckpointSeq kept beside it makes the consumer skip what was already confirmed."""
        ctx, inc = self._ctx, self._inc
        try:
            oldest = ctx.stream.get_shard_iterator(ctx.stream_id, ctx.shard_id)
        except ShardNotFoundError:
            return _shard_gone(ctx, inc)
        except StreamError as err:
            log.warning("shard %s: cannot get a shard iterator for the %s position: %s", ctx.shard_id, what, err)
            return TaskOutcome(retry_after=_backoff(ctx))
        inc.fetch_cursor = oldest
        try:
            inc.checkpointer.write_resume_iterator(oldest)
        except LeaseLostError:
            return TaskOutcome(shutdown=ShutdownReason.LEASE_LOST)
        except LeaseStoreError as err:
            log.warning("shard %s: could not store the %s position (kept in memory): %s", ctx.shard_id, what, err)
        return TaskOutcome()


def _shard_gone(ctx: ShardContext, inc: Incarnation) -> TaskOutcome:
    """The shard vanished: nothing more can ever be read, so it ends here (counted and logged as data loss)."""
    ctx.stats.add("shard_gone_events")
    log.error("DATA LOSS shard %s no longer exists (all its data expired); finishing it", ctx.shard_id)
    inc.fetch_cursor = None
    inc.checkpointer.hand_out("", None, [])
    return TaskOutcome(shutdown=ShutdownReason.SHARD_END, incarnation=inc)


class NotifyShutdownTask:
    """First half of DRAINING: tell the processor why it stops (it may drain and checkpoint)."""

    def __init__(self, ctx: ShardContext, incarnation: Incarnation, reason: ShutdownReason) -> None:
        self._ctx = ctx
        self._inc = incarnation
        self._reason = reason

    def run(self) -> bool:
        """True if the processor's shutdown returned normally."""
        lost = self._reason is ShutdownReason.LEASE_LOST
        timeout = 0.0 if lost else self._ctx.settings.handoff_timeout_seconds
        try:
            self._inc.processor.shutdown(ShutdownInput(self._reason, self._inc.checkpointer, timeout))
            return True
        except Exception:
            log.exception("shard %s: record processor shutdown(%s) failed", self._ctx.shard_id, self._reason)
            return False


class FinalizeTask:
    """Second half of DRAINING: the lease write the reason calls for (§5.3 table)."""

    def __init__(self, ctx: ShardContext, incarnation: Incarnation | None, reason: ShutdownReason) -> None:
        self._ctx = ctx
        self._inc = incarnation
        self._reason = reason

    def run(self) -> TaskOutcome:
        ctx, reason = self._ctx, self._reason
        try:
            if reason is ShutdownReason.SHARD_END:
                self._finish_shard()
            elif reason is ShutdownReason.STOLEN:
                self._hand_over()
            elif reason is ShutdownReason.REQUESTED:
                self._release("released (worker stopping)")
            elif reason is ShutdownReason.FAILED:
                return TaskOutcome(restart=True)
            else:  # LEASE_LOST: nothing to write, it would be refused anyway
                ctx.held.mark_ended("lost")
        except LeaseLostError as exc:
            log.info("shard %s: %s", ctx.shard_id, exc)
        except LeaseStoreError as exc:
            log.warning("shard %s: %s lease write failed, retrying: %s", ctx.shard_id, reason, exc)
            return TaskOutcome(retry_after=_backoff(ctx))
        if self._inc is not None:
            self._inc.checkpointer.close(f"shard consumer ended ({reason})")
        return TaskOutcome(done=True, force_sync=reason is ShutdownReason.SHARD_END)

    def _finish_shard(self) -> None:
        ctx = self._ctx
        if not ctx.held.lease.is_finished:
            assert self._inc is not None, "SHARD_END without a processor incarnation"
            self._inc.checkpointer.write_shard_end()
            ctx.stats.add("shards_finished")
            log.info("shard %s read and confirmed to its end; SHARD_END written", ctx.shard_id)
        self._release("released (shard finished)")

    def _hand_over(self) -> None:
        ctx = self._ctx
        stealer = ctx.held.stealer
        if not stealer:
            self._release("released (steal request vanished)")
            return
        if self._inc is not None:
            self._inc.checkpointer.close("handed over")
        ctx.held.write(
            ctx.clock, lambda lease: ctx.store.transfer(lease, stealer), ends_with=f"transferred to {stealer}"
        )
        ctx.stats.add("leases_transferred")
        log.info("shard %s handed over to %s", ctx.shard_id, stealer)

    def _release(self, why: str) -> None:
        ctx = self._ctx
        if self._inc is not None:
            self._inc.checkpointer.close(why)
        ctx.held.write(ctx.clock, ctx.store.release, ends_with=why)
        ctx.stats.add("leases_released")
