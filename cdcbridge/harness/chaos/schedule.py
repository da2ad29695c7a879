"""Which fault each cycle injects: a seeded plan that covers every kind of fault before it repeats any.

The plan depends only on the seed, the number of cycles and the kinds asked for, so a failing run can be replayed.
"""

from __future__ import annotations

import random
from enum import StrEnum


class FaultKind(StrEnum):
    """One kind of fault of the chaos suite (the injectors in :mod:`.injectors` implement them)."""

    WORKER_KILL = "worker_kill"  # kill -9 of a worker holding leases, then a restart under a new id
    WORKER_ZOMBIE = "worker_zombie"  # SIGSTOP past the lease duration, then SIGCONT
    SHARD_SPLIT = "shard_split"
    SHARD_MERGE = "shard_merge"
    KAFKA_RESTART = "kafka_restart"  # the broker stops (SIGTERM or SIGKILL) and starts on the same port and data
    REGISTRY_OUTAGE = "registry_outage"  # the registry is unreachable while a worker restarts
    EMULATOR_LATENCY = "emulator_latency"
    EMULATOR_ERRORS = "emulator_errors"
    EMULATOR_THROTTLING = "emulator_throttling"
    AMBIGUOUS_WRITES = "ambiguous_writes"  # writes applied, then the connection drops without an answer
    STREAM_TRIM = "stream_trim"  # stream data older than every checkpoint is trimmed
    INCREMENTAL_SNAPSHOT = "incremental_snapshot"  # the CLI (sometimes killed -9 and re-run) or a signal row


ALL_KINDS: tuple[FaultKind, ...] = tuple(FaultKind)


def plan_faults(cycles: int, seed: int, kinds: tuple[FaultKind, ...] = ALL_KINDS) -> list[FaultKind]:
    """`cycles` fault kinds: every kind once in a shuffled order, then again in fresh shuffles, and so on.

    Rounds of whole shuffles keep the kinds evenly spread in a long run (each fires ⌊cycles/len(kinds)⌋ or one
    more times) while the order within a round varies with the seed.
    """
    if cycles < 0:
        raise ValueError(f"cycles must be >= 0, got {cycles}")
    if not kinds:
        raise ValueError("plan at least one fault kind")
    rng = random.Random(seed)
    plan: list[FaultKind] = []
    while len(plan) < cycles:
        round_ = list(dict.fromkeys(kinds))
        rng.shuffle(round_)
        plan.extend(round_)
    return plan[:cycles]
