"""The life of one shard under one lease acquisition, as an explicit state machine (KCL ShardConsumer).

The worker's dispatch loop calls `tick`; all transitions happen there, on one thread. At most one task of a shard
runs at a time on the shared pool; tasks never sleep, the consumer just does not resubmit before `retry_after`.

Shutdown (§5.3): SHARD_END drains until every record is confirmed, then SHARD_END is written and the lease released;
STOLEN / REQUESTED drain for at most the hand-off timeout, then transfer / release; LEASE_LOST closes the
checkpointer first and writes nothing; FAILED restarts a fresh processor from the stored checkpoint. A processor
that keeps its shard unfinished at the end (``hold_open``, e.g. records after ``bridge.end_time``) leaves the
consumer HOLDING: the lease stays held with its checkpoint, nothing is restarted or re-read, and the next shutdown
request goes straight to its lease write (the processor already drained).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future
from enum import Enum, auto

from cdcbridge.coordination.checkpoint.positions import TRIM_HORIZON
from cdcbridge.coordination.leases.held import HeldLease
from cdcbridge.coordination.lifecycle.incarnation import Incarnation, ShardContext
from cdcbridge.coordination.lifecycle.states import ConsumerState, TaskOutcome
from cdcbridge.coordination.lifecycle.tasks import (
    BlockOnParentsTask,
    FinalizeTask,
    InitializeTask,
    NotifyShutdownTask,
    ProcessTask,
)
from cdcbridge.coordination.processor import ShutdownReason

log = logging.getLogger(__name__)


class _DrainPhase(Enum):
    NOTIFY = auto()
    AWAIT = auto()
    FINALIZE = auto()


class ShardConsumer:
    """Drives one shard through its states; created by the worker for each held lease acquisition."""

    def __init__(
        self,
        ctx: ShardContext,
        executor: Executor,
        request_sync: Callable[[], None],
        on_task_done: Callable[[], None] | None = None,
    ) -> None:
        self._ctx = ctx
        self._executor = executor
        self._request_sync = request_sync
        self._on_task_done = on_task_done
        lease = ctx.held.lease
        # A shard that already made progress had its parents finished before: no need to wait again.
        fresh = lease.checkpoint == TRIM_HORIZON and lease.checkpoint_seq is None
        waits = fresh and bool(lease.parent_shard_ids)
        self.state = ConsumerState.WAITING_ON_PARENTS if waits else ConsumerState.INITIALIZING
        self.reason: ShutdownReason | None = None
        self._pending: ShutdownReason | None = None
        self._incarnation: Incarnation | None = None
        self._future: Future[TaskOutcome] | None = None
        self._notify: Future[bool] | None = None
        self._phase = _DrainPhase.NOTIFY
        self._deadline = 0.0
        self._not_before = 0.0

    @property
    def shard_id(self) -> str:
        return self._ctx.shard_id

    @property
    def held(self) -> HeldLease:
        return self._ctx.held

    @property
    def token(self) -> int:
        return self._ctx.held.token

    @property
    def done(self) -> bool:
        return self.state is ConsumerState.DONE

    @property
    def incarnation(self) -> Incarnation | None:
        return self._incarnation

    @property
    def due_at(self) -> float | None:
        """Monotonic time at which `tick` has work again after a back-off; None while a task runs (its end wakes
        the worker) or when nothing waits on time."""
        if self.state in (ConsumerState.DONE, ConsumerState.HOLDING) or self._future is not None:
            return None
        return self._not_before

    def request_shutdown(self, reason: ShutdownReason) -> None:
        """Ask for a shutdown; applied at the next tick. Only a higher-ranked reason replaces a pending one."""
        if self._pending is None or reason.rank > self._pending.rank:
            self._pending = reason
        if reason is ShutdownReason.LEASE_LOST and self._incarnation is not None:
            self._incarnation.checkpointer.close("lease lost")  # stop async checkpoints at once

    def tick(self) -> None:
        """Advance as far as possible without blocking."""
        if self.state is ConsumerState.DONE:
            return
        now = self._ctx.clock.monotonic()
        if self._future is not None:
            if not self._future.done():
                return
            outcome = self._result(self._future)
            self._future = None
            self._apply(outcome, now)
            if self.state is ConsumerState.DONE:
                return
        self._check_lease(now)
        self._apply_pending(now)
        if now < self._not_before:
            return
        if self.state is ConsumerState.DRAINING:
            self._drain(now)
        elif self.state is ConsumerState.WAITING_ON_PARENTS:
            self._submit(BlockOnParentsTask(self._ctx).run)
        elif self.state is ConsumerState.INITIALIZING:
            self._submit(InitializeTask(self._ctx).run)
        elif self.state is ConsumerState.PROCESSING:
            assert self._incarnation is not None
            self._submit(ProcessTask(self._ctx, self._incarnation).run)

    # ----- transitions ----------------------------------------------------------------------------------------

    def _apply(self, outcome: TaskOutcome, now: float) -> None:
        if outcome.incarnation is not None:
            self._incarnation = outcome.incarnation
        if outcome.force_sync:
            self._request_sync()
        self._not_before = now + outcome.retry_after
        if outcome.done:
            self.state = ConsumerState.DONE
            log.info("shard %s consumer done (%s)", self.shard_id, self.reason)
        elif outcome.restart:
            self._restart(now)
        elif outcome.shutdown is not None:
            self._begin_drain(outcome.shutdown)
        elif outcome.next_state is not None:
            self.state = outcome.next_state

    def _check_lease(self, now: float) -> None:
        held = self._ctx.held
        stale = held.ended is None and not held.is_fresh(now, self._ctx.settings.self_fence_after_seconds)
        if stale and held.mark_ended("lost: not renewed within the self-fence window"):
            log.warning("shard %s: lease not renewed in time; stopping without checkpointing", self.shard_id)
        if held.ended is not None and held.ended.startswith("lost"):
            self.request_shutdown(ShutdownReason.LEASE_LOST)

    def _apply_pending(self, now: float) -> None:
        pending = self._pending
        if pending is None:
            return
        # Outside DRAINING any request starts a drain; during one, only LEASE_LOST overrides (FAILED keeps its
        # pending hand-off or release for the final write).
        overrides = pending is ShutdownReason.LEASE_LOST and self.reason is not ShutdownReason.LEASE_LOST
        if self.state is not ConsumerState.DRAINING or overrides:
            self._pending = None
            self._begin_drain(pending)

    def _begin_drain(self, reason: ShutdownReason) -> None:
        already = self.state is ConsumerState.DRAINING
        notify = self._incarnation is not None and self.state is not ConsumerState.HOLDING  # holding: it drained
        self.state = ConsumerState.DRAINING
        self.reason = reason
        if reason is ShutdownReason.LEASE_LOST and self._incarnation is not None:
            self._incarnation.checkpointer.close("lease lost")
        if not already:  # a drain in progress keeps its phase; only the final lease write follows the new reason
            self._phase = _DrainPhase.NOTIFY if notify else _DrainPhase.FINALIZE
            self._not_before = 0.0
        log.info("shard %s draining: %s", self.shard_id, reason)

    def _drain(self, now: float) -> None:
        assert self.reason is not None
        inc = self._incarnation
        if self._phase is _DrainPhase.NOTIFY:
            assert inc is not None
            self._notify = self._executor.submit(NotifyShutdownTask(self._ctx, inc, self.reason).run)
            self._wake_when_done(self._notify)
            self._deadline = now + self._ctx.settings.handoff_timeout_seconds
            self._phase = _DrainPhase.AWAIT
        if self._phase is _DrainPhase.AWAIT:
            assert self._notify is not None and inc is not None
            finished = self._notify.done()
            if not finished and now < self._deadline:
                return
            notified_ok = finished and self._notify.exception() is None and self._notify.result()
            if self.reason is ShutdownReason.SHARD_END:
                if not notified_ok:
                    self._restart(now)
                    return
                if inc.checkpointer.held_open is not None:
                    self._hold(inc.checkpointer.held_open)
                    return
                if not inc.checkpointer.all_confirmed():
                    if now < self._deadline:
                        return  # acks may still arrive asynchronously
                    log.warning(
                        "shard %s: records up to the shard end were not all confirmed within %.0f s; restarting from "
                        "the stored checkpoint",
                        self.shard_id,
                        self._ctx.settings.handoff_timeout_seconds,
                    )
                    self._restart(now)
                    return
            elif not finished:
                log.warning("shard %s: processor did not drain within the hand-off timeout", self.shard_id)
            self._phase = _DrainPhase.FINALIZE
        if self._phase is _DrainPhase.FINALIZE:
            self._submit(FinalizeTask(self._ctx, inc, self._finalize_reason()).run)

    def _hold(self, why: str) -> None:
        """The processor keeps the shard unfinished: keep the lease and its checkpoint, run nothing more."""
        self.state = ConsumerState.HOLDING
        self.reason = None
        self._notify = None
        log.info("shard %s stays unfinished at its end (%s); its lease is kept until the worker stops", self.shard_id,
                 why)  # fmt: skip

    def _finalize_reason(self) -> ShutdownReason:
        """After a failure, a pending hand-off or release wins over a restart."""
        assert self.reason is not None
        if self.reason is ShutdownReason.FAILED and self._pending is not None:
            pending, self._pending = self._pending, None
            return pending
        return self.reason

    def _restart(self, now: float) -> None:
        """Drop the current processor and start a fresh one from the stored checkpoint (the lease is kept)."""
        self._ctx.stats.add("processor_failures")
        if self._incarnation is not None:
            self._incarnation.checkpointer.close("restarted from the stored checkpoint")
        self._incarnation = None
        self._notify = None
        self.reason = None
        self.state = ConsumerState.INITIALIZING
        self._not_before = now + self._ctx.settings.task_retry_backoff_seconds
        log.info("shard %s restarting from its stored checkpoint", self.shard_id)

    # ----- helpers -------------------------------------------------------------------------------------------

    def _submit(self, task: Callable[[], TaskOutcome]) -> None:
        self._future = self._executor.submit(task)
        if self._future.done():  # inline executors finish at once: apply without waiting for the next tick
            outcome = self._result(self._future)
            self._future = None
            self._apply(outcome, self._ctx.clock.monotonic())
        else:
            self._wake_when_done(self._future)

    def _wake_when_done(self, future: Future[object]) -> None:
        """Let the worker's loop run again as soon as a task ends, instead of on its next timed pass: a busy shard
        then goes straight on with its next page (a timed pass alone left a quarter of the bridge's time idle)."""
        if self._on_task_done is not None:
            wake = self._on_task_done
            future.add_done_callback(lambda _: wake())

    def _result(self, future: Future[TaskOutcome]) -> TaskOutcome:
        exc = future.exception()
        if exc is None:
            return future.result()
        log.error("shard %s: task failed unexpectedly: %r", self.shard_id, exc, exc_info=exc)
        if self.state is ConsumerState.DRAINING:
            return TaskOutcome(retry_after=self._ctx.settings.task_retry_backoff_seconds)
        return TaskOutcome(shutdown=ShutdownReason.FAILED, retry_after=self._ctx.settings.task_retry_backoff_seconds)
