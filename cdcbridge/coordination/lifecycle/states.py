"""The states of a shard consumer and what a task reports back (KCL ConsumerStates, leases.md §5.3)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from cdcbridge.coordination.processor import ShutdownReason

if TYPE_CHECKING:
    from cdcbridge.coordination.lifecycle.incarnation import Incarnation


class ConsumerState(StrEnum):
    """WAITING_ON_PARENTS → INITIALIZING → PROCESSING → DRAINING → DONE; one task per state. HOLDING: the shard's
    end was reached but the processor keeps it unfinished (``hold_open``); no task runs until a shutdown request."""

    WAITING_ON_PARENTS = "WAITING_ON_PARENTS"
    INITIALIZING = "INITIALIZING"
    PROCESSING = "PROCESSING"
    DRAINING = "DRAINING"
    HOLDING = "HOLDING"
    DONE = "DONE"


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """What a task asks of its consumer: a new state, a pause, a shutdown, a shard sync."""

    next_state: ConsumerState | None = None
    retry_after: float = 0.0
    shutdown: ShutdownReason | None = None
    force_sync: bool = False
    incarnation: Incarnation | None = None
    #: DRAINING finished: the lease was finished, handed over or released (or is lost).
    done: bool = False
    #: DRAINING gave up on the current processor: start a fresh one from the stored checkpoint.
    restart: bool = False
