"""Durable state for `--data-dir`: a snapshot of the whole instance plus an append-only log of the calls since.

Every successful state-changing model call is appended as one frame (u32 length, u32 CRC-32, pickled
`(method, args, kwargs, now_us)`) and flushed to the OS before the response is sent, so a killed emulator loses
nothing it acknowledged; `os.fsync` runs at most every `fsync_interval_s` (and on close), so a machine crash loses
at most the writes of that interval. A torn frame at the tail (crash mid-write) is cut off on load.

Compaction writes a new snapshot numbered one above the current log, then starts that log and deletes the older
files. A snapshot numbered N covers every log numbered below N, so a crash at any point replays each call once.
The files are pickles: only point `--data-dir` at a directory you trust.
"""

from __future__ import annotations

import os
import pickle
import re
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

_FRAME_HEADER = struct.Struct("<II")
_LOG_NAME = re.compile(r"^journal-(\d{8})\.log$")
_SNAPSHOT_NAME = re.compile(r"^snapshot-(\d{8})\.pickle$")
FORMAT_VERSION = 1

#: One journal entry: the model method, its positional and keyword arguments, and the time it ran at.
Entry = tuple[str, tuple[Any, ...], dict[str, Any], int]


class JournalError(Exception):
    """The data directory cannot be used (unreadable snapshot, wrong format); the message names the file."""


class Journal:
    """Snapshot + log files in one directory. Not thread-safe: the caller serialises appends."""

    def __init__(self, data_dir: str | os.PathLike[str], *, fsync_interval_s: float = 1.0) -> None:
        self.directory = Path(data_dir)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fsync_interval_s = fsync_interval_s
        self._log: BinaryIO | None = None
        self._log_number = 0
        self._last_sync = time.monotonic()
        self._dirty = False

    # -- loading --------------------------------------------------------------------------------------------------

    def _numbered(self, pattern: re.Pattern[str]) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.iterdir():
            match = pattern.match(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def load(self) -> tuple[Any | None, Iterator[Entry]]:
        """The newest snapshot's state (None if there is none) and the logged calls to replay on top of it."""
        snapshots = self._numbered(_SNAPSHOT_NAME)
        state = None
        first_log = 0
        if snapshots:
            first_log, path = snapshots[-1]
            try:
                with path.open("rb") as file:
                    version, state = pickle.load(file)
            except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError) as exc:
                raise JournalError(
                    f"Cannot read emulator snapshot {path}: {str(exc).rstrip('.')}. Move the data directory away."
                ) from exc
            if version != FORMAT_VERSION:
                raise JournalError(f"Snapshot {path} has format {version}, this emulator reads {FORMAT_VERSION}.")
        logs = [(n, p) for n, p in self._numbered(_LOG_NAME) if n >= first_log]
        self._log_number = logs[-1][0] if logs else first_log
        return state, self._entries(logs)

    def _entries(self, logs: list[tuple[int, Path]]) -> Iterator[Entry]:
        for _, path in logs:
            yield from _read_frames(path)

    # -- writing --------------------------------------------------------------------------------------------------

    def _open_log(self) -> BinaryIO:
        if self._log is None:
            self._log = (self.directory / f"journal-{self._log_number:08d}.log").open("ab")
        return self._log

    def append(self, entry: Entry) -> None:
        data = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
        log = self._open_log()
        log.write(_FRAME_HEADER.pack(len(data), zlib.crc32(data)) + data)
        log.flush()
        self._dirty = True
        if time.monotonic() - self._last_sync >= self.fsync_interval_s:
            self.sync()

    def sync(self) -> None:
        if self._log is not None and self._dirty:
            os.fsync(self._log.fileno())
            self._dirty = False
        self._last_sync = time.monotonic()

    def compact(self, state: Any) -> None:
        """Write `state` as the new snapshot, then continue in a fresh log and drop the files it covers."""
        self.close()
        number = self._log_number + 1
        final = self.directory / f"snapshot-{number:08d}.pickle"
        temporary = final.with_suffix(".tmp")
        with temporary.open("wb") as file:
            pickle.dump((FORMAT_VERSION, state), file, protocol=pickle.HIGHEST_PROTOCOL)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, final)
        _fsync_directory(self.directory)
        self._log_number = number
        for pattern in (_LOG_NAME, _SNAPSHOT_NAME):
            for old_number, path in self._numbered(pattern):
                if old_number < number:
                    path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._log is not None:
            self.sync()
            self._log.close()
            self._log = None


def _read_frames(path: Path) -> Iterator[Entry]:
    """Frames of one log; a torn or corrupt tail is cut off so later appends follow the last good frame."""
    with path.open("rb") as file:
        data = file.read()
    position = 0
    while position + _FRAME_HEADER.size <= len(data):
        length, crc = _FRAME_HEADER.unpack_from(data, position)
        start = position + _FRAME_HEADER.size
        payload = data[start : start + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            break
        yield pickle.loads(payload)
        position = start + length
    if position < len(data):
        with path.open("r+b") as file:
            file.truncate(position)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
