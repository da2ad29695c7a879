"""The bridge workers of a chaos run: a fixed number of slots, each running one `cdcbridge run` process at a time.

A restarted worker gets a new id (`<prefix><slot>-<incarnation>`), as a real restart does (the default id is
host-pid), so it never inherits the dead process's leases by name. A worker that exits without being killed by
the harness is an *unexpected exit*: it is counted, its log tail kept for the report, and the slot restarted, as a
supervisor would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.kafka.sink import PRODUCER_REPLACED

#: A bridge log line that announces data loss (trimmed data read past, or a shard gone before it was read).
DATA_LOSS_LINE = re.compile(r"DATA LOSS")
#: A worker replaced its Kafka producer after a message timed out (cdcbridge.kafka.sink).
PRODUCER_REPLACED_LINE = re.compile(re.escape(PRODUCER_REPLACED))


@dataclass
class UnexpectedExit:
    worker_id: str
    exit_code: int | None
    log_tail: str


@dataclass
class WorkerSlot:
    index: int
    prefix: str
    incarnation: int = 0
    process: BridgeWorkerProcess | None = None
    #: The harness killed or stopped the current process (its end is not unexpected).
    ended_on_purpose: bool = False

    @property
    def worker_id(self) -> str:
        return f"{self.prefix}{self.index}-{self.incarnation}"


@dataclass
class WorkerPool:
    config_path: Path
    work_dir: Path
    size: int
    prefix: str = "chaos-w"
    slots: list[WorkerSlot] = field(default_factory=list)
    starts: int = 0
    unexpected_exits: list[UnexpectedExit] = field(default_factory=list)
    log_paths: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.slots = [WorkerSlot(index, self.prefix) for index in range(1, self.size + 1)]

    def start_all(self) -> None:
        for slot in self.slots:
            self.start(slot)

    def start(self, slot: WorkerSlot) -> str:
        """Start the slot's next incarnation; returns its worker id."""
        slot.incarnation += 1
        slot.ended_on_purpose = False
        log_path = self.work_dir / f"{slot.worker_id}.log"
        slot.process = BridgeWorkerProcess(self.config_path, slot.worker_id, log_path).start()
        self.starts += 1
        self.log_paths.append(slot.process.log_path)
        return slot.worker_id

    def live_slots(self) -> list[WorkerSlot]:
        return [slot for slot in self.slots if slot.process is not None and slot.process.alive]

    def kill(self, slot: WorkerSlot) -> None:
        """kill -9 (the slot stays empty until `start`)."""
        slot.ended_on_purpose = True
        if slot.process is not None:
            slot.process.kill()

    def restart_unexpectedly_exited(self) -> list[UnexpectedExit]:
        """Restart slots whose process ended on its own; returns what was found (also kept in `unexpected_exits`)."""
        found = []
        for slot in self.slots:
            process = slot.process
            if process is None or process.returncode is None or slot.ended_on_purpose:
                continue  # not started, still running, or ended by the harness
            found.append(UnexpectedExit(slot.worker_id, process.returncode, process.log_tail()))
            self.start(slot)
        self.unexpected_exits += found
        return found

    def stop_all(self) -> None:
        """SIGTERM every worker (drain, checkpoint, release), SIGKILL what does not stop."""
        for slot in self.slots:
            slot.ended_on_purpose = True
            if slot.process is not None:
                slot.process.stop()

    def log_lines(self, *patterns: re.Pattern[str]) -> list[list[str]]:
        """Per pattern, every log line of every worker ever started that it finds (the logs read once)."""
        found: list[list[str]] = [[] for _ in patterns]
        for path in self.log_paths:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                for lines, pattern in zip(found, patterns, strict=True):
                    if pattern.search(line):
                        lines.append(line)
        return found
