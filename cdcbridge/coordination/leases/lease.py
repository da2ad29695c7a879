"""The lease row of one shard, as the status table stores it (seed schema, leases.md §2.2)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from cdcbridge.coordination.checkpoint.positions import SHARD_END, TRIM_HORIZON, ExtendedSequence

#: Value of the StatusType primary-key column for lease rows (the table is shared with other status rows).
LEASE_STATUS_TYPE = "LeaseKey"

# Column names of the status table (seed schema plus the optional CheckpointSeq).
COL_STREAM_ID = "StreamId"
COL_STATUS_TYPE = "StatusType"
COL_STATUS_VALUE = "StatusValue"
COL_CHECKPOINT = "Checkpoint"
COL_CHECKPOINT_SEQ = "CheckpointSeq"
COL_LEASE_COUNTER = "LeaseCounter"
COL_LEASE_OWNER = "LeaseOwner"
COL_LEASE_STEALER = "LeaseStealer"
COL_PARENT_SHARD_IDS = "ParentShardIds"

#: Marks "nobody" in LeaseOwner / LeaseStealer (the Java client's convention).
NOBODY = ""


def encode_parent_ids(parent_ids: tuple[str, ...]) -> str:
    """ParentShardIds as the Java client writes it: each id followed by a newline."""
    return "".join(f"{p}\n" for p in parent_ids)


def decode_parent_ids(text: str) -> tuple[str, ...]:
    return tuple(p for p in text.split("\n") if p)


@dataclass(frozen=True, slots=True, order=True)
class LeaseKey:
    """Primary key of a lease row: (StreamId, "LeaseKey", shard id)."""

    stream_id: str
    shard_id: str


@dataclass(frozen=True, slots=True)
class Lease:
    """An observed (or written) state of a lease row.

    `counter` is the optimistic lock and heartbeat: every successful write raises it by one (I1).
    `owner == ""` means released / never taken; `stealer` names a worker that asked for a hand-off.
    """

    stream_id: str
    shard_id: str
    counter: int = 0
    owner: str = NOBODY
    stealer: str = NOBODY
    checkpoint: str = TRIM_HORIZON
    checkpoint_seq: ExtendedSequence | None = None
    parent_shard_ids: tuple[str, ...] = ()

    @property
    def key(self) -> LeaseKey:
        return LeaseKey(self.stream_id, self.shard_id)

    @property
    def is_finished(self) -> bool:
        """The shard was read and confirmed to its end: never taken or balanced again (FINISHED, §5.3)."""
        return self.checkpoint == SHARD_END

    @property
    def is_owned(self) -> bool:
        return self.owner != NOBODY

    @property
    def has_stealer(self) -> bool:
        return self.stealer != NOBODY

    def evolve(self, **changes: object) -> Lease:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def describe(self) -> str:
        """One-line summary for logs."""
        seq = self.checkpoint_seq.to_text() if self.checkpoint_seq else "-"
        return (
            f"{self.shard_id} owner={self.owner or '-'} counter={self.counter} stealer={self.stealer or '-'} "
            f"checkpoint={_short(self.checkpoint)} seq={seq}"
        )


def _short(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
