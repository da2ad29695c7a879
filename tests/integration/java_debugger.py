"""jdb, the JDK's command-line debugger, driven from a test: it holds chosen threads of a JVM at chosen lines, so a
race between threads is played in a fixed order instead of waited for under load."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path


class DebuggerError(Exception):
    """jdb did not show what the test waited for; the message holds its transcript's tail."""


class Jdb:
    """jdb attached to a JVM started with `-agentlib:jdwp=transport=dt_socket,server=y,suspend=y,address=...`.

    Its transcript goes to `transcript`; `wait_for` reads it from where the previous wait stopped."""

    def __init__(self, jdb: Path, address: str, transcript: Path) -> None:
        self.transcript = transcript
        self._read_up_to = 0
        with transcript.open("w") as out:
            self._process = subprocess.Popen(
                [str(jdb), "-attach", address], stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip

    def send(self, command: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()

    def wait_for(self, *patterns: str, timeout: float = 30) -> list[re.Match[str]]:
        """A match of each pattern (in any order) in the transcript after the previous wait's last match."""
        deadline = time.monotonic() + timeout
        compiled = [re.compile(pattern, re.M) for pattern in patterns]
        while True:
            text = self.transcript.read_text(errors="replace")
            matches = [regex.search(text, self._read_up_to) for regex in compiled]
            if all(match is not None for match in matches):
                found = [match for match in matches if match is not None]
                self._read_up_to = max(match.end() for match in found)
                return found
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise DebuggerError(f"jdb never showed all of {patterns}; its transcript ends:\n{text[-2000:]}")
            time.sleep(0.05)

    @staticmethod
    def breakpoint_hit(thread: str, cls: str, line: int) -> str:
        """The pattern of `thread` (a name prefix) stopping at `cls`:`line`."""
        return rf'Breakpoint hit: "thread={re.escape(thread)}[^"]*", {re.escape(cls)}\.\w+\(\), line={line}\b'

    def thread_id(self, name: str) -> str:
        """jdb's id of the thread called `name`, for `resume <id>`."""
        self.send("threads")
        (match,) = self.wait_for(rf"\(java\.lang\.Thread\)(\S+)\s+{re.escape(name)}\s")
        return match.group(1)

    def close(self) -> None:
        """Detach (the JVM runs on without breakpoints) and end jdb."""
        if self._process.poll() is None:
            try:
                self.send("quit")
                self._process.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
