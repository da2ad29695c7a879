"""Parsing lease rows of the status table, which people can edit by hand (the Tablestore console, a script).

A row the protocol cannot act on safely (no integer LeaseCounter, a column of the wrong type, a misspelt sentinel
checkpoint) is *invalid*: its shard is not taken or read until someone fixes or deletes the row, and the error names
the row and the fix. Acting on it would risk a skipped or reordered shard; leaving it alone only delays the shard,
and a deleted row is re-created by the shard sync from TRIM_HORIZON (records are read again, none is lost).

Oddities that cannot lose or reorder anything are accepted with a warning: an unparseable CheckpointSeq (resume
without de-duplicating already confirmed records), a missing Checkpoint (read from the oldest retained record).
A negative LeaseCounter is a valid version: the counter only has to change, never to be positive.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from cdcbridge.coordination.checkpoint.positions import SHARD_END, TRIM_HORIZON, ExtendedSequence
from cdcbridge.coordination.leases.lease import (
    COL_CHECKPOINT,
    COL_CHECKPOINT_SEQ,
    COL_LEASE_COUNTER,
    COL_LEASE_OWNER,
    COL_LEASE_STEALER,
    COL_PARENT_SHARD_IDS,
    LEASE_STATUS_TYPE,
    NOBODY,
    Lease,
    decode_parent_ids,
)

log = logging.getLogger(__name__)

#: A counter this large cannot be raised by one (Tablestore INTEGER is a signed 64-bit value).
MAX_COUNTER = 2**63 - 2
#: How often a still-invalid row is reported again (its first sighting is reported at once).
REPORT_AGAIN_AFTER_SECONDS = 300.0
_MAX_REMEMBERED = 10_000

_STRING_COLUMNS = (COL_CHECKPOINT, COL_CHECKPOINT_SEQ, COL_LEASE_OWNER, COL_LEASE_STEALER, COL_PARENT_SHARD_IDS)
_SENTINELS = (TRIM_HORIZON, SHARD_END)
_DELETE_FIX = (
    "or delete the row: the bridge then re-creates it and re-reads the shard from its oldest retained record "
    "(records are sent again, none is lost)"
)


def row_name(stream_id: str, shard_id: str) -> str:
    """How messages name a lease row: its primary key."""
    return f"lease row (StreamId={stream_id!r}, StatusType={LEASE_STATUS_TYPE!r}, StatusValue={shard_id!r})"


class InvalidLeaseRowError(ValueError):
    """A lease row the protocol refuses to act on; the message names the row, what is wrong and the fix."""

    def __init__(self, stream_id: str, shard_id: str, problems: list[str], fixes: list[str]) -> None:
        self.stream_id = stream_id
        self.shard_id = shard_id
        self.problems = tuple(problems)
        self.fixes = tuple(dict.fromkeys(fixes))
        super().__init__(
            f"{row_name(stream_id, shard_id)} is invalid: {'; '.join(self.problems)}. The shard is not read until "
            f"the row is fixed. Fix: {'; '.join(self.fixes)}, {_DELETE_FIX}"
        )


@dataclass(frozen=True, slots=True)
class ParsedLeaseRow:
    """A lease and what was odd but harmless about its row (each warning names the row)."""

    lease: Lease
    warnings: tuple[str, ...] = ()


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "INTEGER"
    if isinstance(value, float):
        return "DOUBLE"
    if isinstance(value, bytes | bytearray):
        return "BINARY"
    if isinstance(value, str):
        return "STRING"
    return type(value).__name__


def _check_counter(value: object, problems: list[str], fixes: list[str]) -> int | None:
    if value is None:
        problems.append(f"it has no {COL_LEASE_COUNTER} column")
    elif isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{COL_LEASE_COUNTER} is {_type_name(value)} {value!r}, not an INTEGER")
    elif value > MAX_COUNTER:
        problems.append(f"{COL_LEASE_COUNTER} {value} cannot be raised any further (64-bit limit)")
    else:
        return value
    fixes.append(f"set {COL_LEASE_COUNTER} to an INTEGER such as 0 while no worker holds the lease")
    return None


def _check_checkpoint(value: object, problems: list[str], fixes: list[str]) -> None:
    if not isinstance(value, str):
        return  # a wrong type is reported with the other string columns
    stripped = value.strip()
    for sentinel in _SENTINELS:
        if value != sentinel and stripped.upper() == sentinel:
            problems.append(f"{COL_CHECKPOINT} {value!r} is not the sentinel {sentinel!r} (case and spaces matter)")
            fixes.append(f"set {COL_CHECKPOINT} to exactly {sentinel}")


def parse_lease_row(stream_id: str, shard_id: str, columns: dict[str, str | int]) -> ParsedLeaseRow:
    """The lease a stored row holds; raises InvalidLeaseRowError when the protocol cannot act on it safely."""
    problems: list[str] = []
    fixes: list[str] = []
    counter = _check_counter(columns.get(COL_LEASE_COUNTER), problems, fixes)
    for name in _STRING_COLUMNS:
        value = columns.get(name)
        if value is not None and not isinstance(value, str):
            problems.append(f"{name} is {_type_name(value)} {value!r}, not a STRING")
            fixes.append(f"write {name} as a STRING")
    _check_checkpoint(columns.get(COL_CHECKPOINT), problems, fixes)
    if problems or counter is None:
        raise InvalidLeaseRowError(stream_id, shard_id, problems, fixes)

    warnings: list[str] = []
    seq = None
    seq_text = columns.get(COL_CHECKPOINT_SEQ)
    if isinstance(seq_text, str) and seq_text:
        try:
            seq = ExtendedSequence.from_text(seq_text)
        except ValueError as exc:
            warnings.append(
                f"{row_name(stream_id, shard_id)}: {exc}; resuming from {COL_CHECKPOINT} without skipping records "
                f"already confirmed (some are sent again, none is lost); the next checkpoint rewrites it"
            )
    checkpoint = columns.get(COL_CHECKPOINT)
    if checkpoint is None:
        warnings.append(
            f"{row_name(stream_id, shard_id)} has no {COL_CHECKPOINT} column; the shard is read from its oldest "
            "retained record" + (f", skipping records up to {seq_text}" if seq is not None else "")
        )
    return ParsedLeaseRow(
        Lease(
            stream_id=stream_id,
            shard_id=shard_id,
            counter=counter,
            owner=str(columns.get(COL_LEASE_OWNER, NOBODY)),
            stealer=str(columns.get(COL_LEASE_STEALER, NOBODY)),
            checkpoint=str(checkpoint or TRIM_HORIZON),
            checkpoint_seq=seq,
            parent_shard_ids=decode_parent_ids(str(columns.get(COL_PARENT_SHARD_IDS, ""))),
        ),
        tuple(warnings),
    )


class LeaseRowReporter:
    """Logs each invalid row or warning when first seen and again every few minutes while it persists.

    Every lease scan (each take interval, on every worker) meets the same bad row; logging it each time would bury
    it, logging it once would let it be forgotten. Also remembers the invalid rows of the last scan per stream, for
    `cdcbridge status`.
    """

    def __init__(self, now: Callable[[], float], repeat_after_seconds: float = REPORT_AGAIN_AFTER_SECONDS) -> None:
        self._now = now
        self._repeat_after = repeat_after_seconds
        self._lock = threading.Lock()
        #: (stream id, shard id, text) → when it was last logged.
        self._last_logged: dict[tuple[str, str, str], float] = {}
        self._invalid: dict[str, dict[str, InvalidLeaseRowError]] = {}

    def invalid(self, error: InvalidLeaseRowError) -> None:
        with self._lock:
            self._invalid.setdefault(error.stream_id, {})[error.shard_id] = error
        self._log(logging.ERROR, error.stream_id, error.shard_id, str(error))

    def valid(self, stream_id: str, shard_id: str, warnings: tuple[str, ...]) -> None:
        with self._lock:
            if self._invalid.get(stream_id, {}).pop(shard_id, None) is not None:
                # Fixed: should it break again, say so at once.
                for key in [k for k in self._last_logged if k[:2] == (stream_id, shard_id)]:
                    del self._last_logged[key]
        for warning in warnings:
            self._log(logging.WARNING, stream_id, shard_id, warning)

    def scanned(self, stream_id: str, shard_ids: set[str]) -> None:
        """Forget invalid rows of `stream_id` that a full scan no longer returned (deleted by hand)."""
        with self._lock:
            known = self._invalid.get(stream_id, {})
            for shard_id in set(known) - shard_ids:
                del known[shard_id]

    def invalid_rows(self, stream_id: str) -> list[InvalidLeaseRowError]:
        with self._lock:
            return [self._invalid[stream_id][s] for s in sorted(self._invalid.get(stream_id, {}))]

    def _log(self, level: int, stream_id: str, shard_id: str, text: str) -> None:
        now = self._now()
        key = (stream_id, shard_id, text)
        with self._lock:
            last = self._last_logged.get(key)
            if last is not None and now - last < self._repeat_after:
                return
            if len(self._last_logged) >= _MAX_REMEMBERED:
                self._last_logged.clear()  # bounded memory; at worst a row is reported again early
            self._last_logged[key] = now
        log.log(level, text)
