"""Every record the source stream ever held: the ground truth of "every change is in Kafka at least once".

The stream forgets what a trim removes, so trims go through the ledger: it reads the stream back, picks the cut
(only records every shard has checkpointed), keeps the records the cut removes, then asks the emulator to trim.
At the end, what the stream still holds plus what the ledger kept is every record ever written.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdcbridge.changes import ChangeRecord
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.harness.chaos.checks import SourceChange
from cdcbridge.harness.chaos.progress import safe_trim_before_us
from cdcbridge.harness.demo import read_stream_records
from cdcbridge.harness.emulator_admin import EmulatorAdmin


@dataclass(frozen=True)
class TrimResult:
    before_ms: int
    #: Records read back and kept before the trim.
    kept: int
    #: Records the emulator says it dropped (equal to `kept` unless the harness raced with the stream).
    dropped: int


class StreamLedger:
    def __init__(self, streams: Any, stream_id: str, table: str, admin: EmulatorAdmin) -> None:
        self._streams = streams
        self._stream_id = stream_id
        self._table = table
        self._admin = admin
        self.trimmed: list[SourceChange] = []
        #: Trims whose dropped count differed from the records kept (a harness race; should stay 0).
        self.mismatched_trims = 0

    def read_retained(self) -> dict[str, list[ChangeRecord]]:
        """The records the stream holds now, per shard, in commit order."""
        return read_stream_records(self._streams, self._stream_id, self._table)

    def trim_checkpointed(self, leases: Mapping[str, Lease]) -> TrimResult:
        """Trim the stream up to the oldest record some shard has not checkpointed yet, keeping what goes.

        The cut is bounded by the time taken *before* reading the stream: a record committed while reading has a
        later commit time, so the cut can never take a record this read did not see.
        """
        read_started_us = time.time_ns() // 1000
        retained = self.read_retained()
        sequences = {shard: [record.sequence for record in records] for shard, records in retained.items()}
        before_ms = safe_trim_before_us(sequences, leases, read_started_us) // 1000
        doomed = [
            record
            for records in retained.values()
            for record in records
            if record.sequence.timestamp_us < before_ms * 1000
        ]
        if not doomed:
            return TrimResult(before_ms, 0, 0)
        self.trimmed.extend(SourceChange.from_record(record, trimmed=True) for record in doomed)
        dropped = self._admin.trim(self._table, before_ms)
        if dropped != len(doomed):
            self.mismatched_trims += 1
        return TrimResult(before_ms, len(doomed), dropped)

    def all_changes(self) -> list[SourceChange]:
        """Every record ever in the stream: what it holds now and what trims removed."""
        retained = [SourceChange.from_record(r) for records in self.read_retained().values() for r in records]
        return self.trimmed + retained
