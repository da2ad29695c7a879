"""The one process helper of the harness: every process a tool or a test starts goes through here.

- Services (`start_service`, `ProcessRecord`): the local stack's Kafka, registry and emulator, detached in their own
  session with a pid file, so `cdcbridge stack down` in another shell stops them; a stop only ever signals the very
  process we started (pid plus its kernel start time, so a recycled pid is never killed).
- Children (`ChildProcess`): processes one run owns and ends itself (bridge workers, recording workers, an
  emulator, a job): output to a log file, signals (kill -9, SIGTERM drain, SIGSTOP freeze), waits on the log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from cdcbridge.harness.emulator_admin import EmulatorAdmin


class ProcessError(RuntimeError):
    """A process of the harness did not start, answer or end in time; the message names it and its log."""


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
        raise ProcessError(
            f"{service} cannot start: port {host}:{port} is busy; stop what uses it or pick another port"
        )


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
    inherit_env: bool = True,
) -> ProcessRecord:
    """Start `argv` in its own session with output to `<state>/<name>.log`; return once `ready()` is true. `env`
    adds to this process's environment, or with `inherit_env=False` is the whole environment.

    Raises ProcessError naming the log file when the process exits early or does not become ready in time.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    log = state_dir / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**(os.environ if inherit_env else {}), **(env or {})}, cwd=cwd, start_new_session=True,
        )  # fmt: skip
    start_time = _start_time(proc.pid)
    record = ProcessRecord(name, proc.pid, start_time or 0, str(log), endpoint)
    record.save(state_dir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            record.stop(state_dir)
            raise ProcessError(f"{name} exited with code {code} while starting; see {log}: {_log_tail(log)}")
        try:
            if ready():
                return record
        except Exception:
            pass
        time.sleep(0.25)
    record.stop(state_dir)
    raise ProcessError(f"{name} did not answer at {endpoint} within {timeout:.0f}s; see {log}: {_log_tail(log)}")


# ----- children: processes one run starts, watches and ends -------------------------------------------------------


class ChildProcess:
    """A child process whose stdout and stderr go to `log_path` (appended: a restart keeps the earlier output).

    `start` may be called again after the process ended (a restart under the same name). Nothing is persisted:
    whoever starts it ends it (`stop`, `kill` or `ensure_dead` in a finally).
    """

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:  # fmt: skip
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env or {})
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None
        self.frozen = False

    def start(self) -> ChildProcess:
        """Start (or restart) the process; returns self. Python children write unbuffered, so the log is live."""
        if self.alive:
            raise ProcessError(f"{self.name} is running already (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.cwd,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            )  # fmt: skip
        self.frozen = False
        return self

    @property
    def pid(self) -> int:
        return self._started().pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: the signal that ended it), or None while it runs or before it started."""
        return None if self.process is None else self.process.poll()

    def send(self, sig: signal.Signals) -> float:
        """Send a signal; returns the wall time right after it was sent (what failover timings start from)."""
        self._started().send_signal(sig)
        if sig is signal.SIGSTOP:
            self.frozen = True
        elif sig is signal.SIGCONT:
            self.frozen = False
        return time.time()

    def freeze(self) -> None:
        """SIGSTOP: the process keeps its leases on paper but stops renewing them (a zombie once they expire)."""
        if self.alive:
            self.send(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after `freeze`."""
        if self.alive and self.frozen:
            self.send(signal.SIGCONT)
        self.frozen = False

    def kill(self, timeout: float = 30) -> float:
        """kill -9 (no drain, no checkpoint, no release); returns once it is gone, with the wall time of the kill."""
        killed_at = time.time()
        if self.alive:
            killed_at = self.send(signal.SIGKILL)
            self.wait(timeout)
        self.frozen = False
        return killed_at

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM (a worker drains, checkpoints and releases its leases), SIGKILL if it does not end in time."""
        self.thaw()
        if self.alive:
            self.send(signal.SIGTERM)
            try:
                return self._started().wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.returncode

    def wait(self, timeout: float) -> int:
        """The exit code, once the process ended; ProcessError if it runs on past `timeout`."""
        try:
            return self._started().wait(timeout)
        except subprocess.TimeoutExpired:
            raise ProcessError(f"{self.name} did not exit within {timeout:.0f}s; see {self.log_path}") from None

    def ensure_dead(self) -> None:
        """Cleanup: wake a frozen process and kill whatever still runs."""
        if self.alive:
            self.thaw()
            self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def wait_for_log(self, pattern: str, *, count: int = 1, timeout: float = 90) -> list[re.Match[str]]:
        """The first `count` matches of `pattern` in the log, once there; ProcessError if the process ends first
        or `timeout` passes (with the log's tail)."""
        deadline = time.monotonic() + timeout
        while True:
            matches = list(re.finditer(pattern, self.log()))
            if len(matches) >= count:
                return matches[:count]
            if not self.alive:
                raise ProcessError(f"{self.name} ended (exit code {self.returncode}) before its log showed "
                                   f"{count}× /{pattern}/; log tail:\n{self.log_tail()}")  # fmt: skip
            if time.monotonic() > deadline:
                raise ProcessError(f"timed out after {timeout:.0f}s waiting for {count}× /{pattern}/ in the log of "
                                   f"{self.name}; log tail:\n{self.log_tail()}")  # fmt: skip
            time.sleep(0.1)

    def _started(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            raise ProcessError(f"{self.name} was not started")
        return self.process


class BridgeWorkerProcess(ChildProcess):
    """One bridge worker, `cdcbridge run --config FILE --worker-id ID`, as a child process."""

    def __init__(self, config_path: Path, worker_id: str, log_path: Path, *, cwd: Path | None = None) -> None:
        argv = [sys.executable, "-m", "cdcbridge", "run", "--config", str(config_path), "--worker-id", worker_id]
        super().__init__(worker_id, argv, log_path, cwd=cwd)
        self.config_path = config_path
        self.worker_id = worker_id

    def start(self) -> BridgeWorkerProcess:
        super().start()
        return self


class EmulatorProcess(ChildProcess):
    """`cdcbridge emulator --port 0` as a child process; `url` and `admin` once started."""

    def __init__(self, log_path: Path, *, host: str = "127.0.0.1", extra_args: Sequence[str] = ()) -> None:
        argv = [sys.executable, "-m", "cdcbridge", "emulator", "--host", host, "--port", "0", *extra_args]
        super().__init__("the emulator", argv, log_path)
        self.url = ""
        self.admin = EmulatorAdmin("http://unstarted")

    def start(self, timeout: float = 60) -> EmulatorProcess:
        """Start it and wait for its "listening on URL" line (its port is only known then)."""
        super().start()
        try:
            (match,) = self.wait_for_log(r"listening on (\S+)", timeout=timeout)
        except ProcessError:
            self.ensure_dead()
            raise
        self.url = match.group(1)
        self.admin = EmulatorAdmin(self.url)
        return self


class RecordingWorkerProcess(ChildProcess):
    """One recording worker (`python -m cdcbridge.harness.recording_worker`) with its SQLite journal and its log
    in `work_dir` (`<worker id>.sqlite`, `<worker id>.log`)."""

    def __init__(self, worker_id: str, work_dir: Path, argv_of: Callable[[Path], list[str]]) -> None:
        """`argv_of(journal path)`: the command line (`WorkerOptions.argv` of the recording worker)."""
        self.worker_id = worker_id
        self.db = work_dir / f"{worker_id}.sqlite"
        super().__init__(worker_id, argv_of(self.db), work_dir / f"{worker_id}.log")

    def start(self) -> RecordingWorkerProcess:
        if self.db.exists():
            raise ProcessError(f"journal {self.db} exists: give every worker process its own id")
        super().start()
        return self
