"""A background service process we started: pid file, log file, readiness wait, and a stop that only ever
signals the very process we started (pid plus its kernel start time, so a recycled pid is never killed)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from cdcbridge.harness.stack.errors import StackError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def require_free_port(service: str, host: str, port: int) -> None:
    if not port_is_free(host, port):
        raise StackError(f"{service} cannot start: port {host}:{port} is busy; stop what uses it or pick another port")


def _start_time(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie has exited already
        return None
    return int(fields[19])


@dataclass
class ProcessRecord:
    """What we persist about a started service, enough to find and stop exactly it later."""

    name: str
    pid: int
    start_time: int
    log: str
    endpoint: str

    def is_running(self) -> bool:
        return _start_time(self.pid) == self.start_time

    def save(self, state_dir: Path) -> None:
        (state_dir / f"{self.name}.json").write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, state_dir: Path, name: str) -> ProcessRecord | None:
        path = state_dir / f"{name}.json"
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))

    def stop(self, state_dir: Path, timeout: float = 20.0) -> bool:
        """SIGTERM (services shut down cleanly on it), SIGKILL after `timeout`; True if we stopped something."""
        stopped = False
        if self.is_running():
            os.killpg(self.pid, signal.SIGTERM) if _is_group_leader(self.pid) else os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.is_running() and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.is_running():
                os.kill(self.pid, signal.SIGKILL)
            stopped = True
        (state_dir / f"{self.name}.json").unlink(missing_ok=True)
        return stopped


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _is_stack_frame(line: str) -> bool:
    return line.startswith("at ") or (line.startswith("... ") and line.endswith(" more"))


def _log_tail(log: Path, lines: int = 5) -> str:
    """The last `lines` lines of `log` that are not stack frames, so a JVM's fatal error and its cause (for
    example "java.lang.OutOfMemoryError: Java heap space") reach the message rather than the frames below them."""
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    kept = [line for line in map(str.strip, text) if line and not _is_stack_frame(line)]
    return " | ".join(kept[-lines:])


def start_service(
    name: str,
    argv: list[str],
    *,
    state_dir: Path,
    endpoint: str,
    ready: Callable[[], bool],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120.0,
) -> ProcessRecord:
    """Start `argv` in its own session with output to `<state>/<name>.log`; return once `ready()` is true.

    Raises StackError naming the log file when the process exits early or does not become ready in time.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    log = state_dir / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True,
        )  # fmt: skip
    start_time = _start_time(proc.pid)
    record = ProcessRecord(name, proc.pid, start_time or 0, str(log), endpoint)
    record.save(state_dir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            record.stop(state_dir)
            raise StackError(f"{name} exited with code {code} while starting; see {log}: {_log_tail(log)}")
        try:
            if ready():
                return record
        except Exception:
            pass
        time.sleep(0.25)
    record.stop(state_dir)
    raise StackError(f"{name} did not answer at {endpoint} within {timeout:.0f}s; see {log}: {_log_tail(log)}")
