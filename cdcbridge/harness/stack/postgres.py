"""A throw-away PostgreSQL server for tests and benchmarks: Debian's binaries, a temp data dir, loopback only.

Needs the Debian ``postgresql`` package (``apt-get install -y postgresql``; the Makefile's system-deps step
installs it). PostgreSQL refuses to run as root, so under uid 0 the server runs as the ``postgres`` OS user
(``runuser``) and the data dir is given to that user. Authentication is ``trust`` on 127.0.0.1 only: this server
is for local tests, never for data that matters.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cdcbridge.harness.processes import free_port
from cdcbridge.harness.stack.errors import StackError

POSTGRES_OS_USER = "postgres"
_BIN_GLOB = "/usr/lib/postgresql/*/bin"


def find_postgres_bin(pattern: str = _BIN_GLOB) -> Path:
    """The newest Debian PostgreSQL bin folder holding initdb and pg_ctl."""
    candidates = [Path(p) for p in sorted(Path("/").glob(pattern.lstrip("/")), key=_major_version)]
    for folder in reversed(candidates):
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    raise StackError(
        f"PostgreSQL server binaries not found in {pattern}; install them with `apt-get install -y postgresql` "
        "(make system-deps does)"
    )


def _major_version(path: Path) -> int:
    match = re.search(r"/(\d+)/bin$", str(path))
    return int(match.group(1)) if match else 0


def _run_as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    if shutil.which("runuser") is None:
        raise StackError("running as root needs `runuser` (util-linux) to start PostgreSQL as the postgres user")
    return ["runuser", "-u", POSTGRES_OS_USER, "--", *argv]


def _give_to_server_user(path: Path) -> None:
    if os.geteuid() != 0:
        return
    try:
        import pwd

        entry = pwd.getpwnam(POSTGRES_OS_USER)
    except KeyError:
        raise StackError(
            f"PostgreSQL refuses to run as root and there is no {POSTGRES_OS_USER!r} user; install the Debian "
            "postgresql package (it creates the user) or run as a normal user"
        ) from None
    os.chown(path, entry.pw_uid, entry.pw_gid)


@dataclass
class PostgresServer:
    """One server on 127.0.0.1:`port` (0 picks a free port) with its data under a fresh temp folder."""

    port: int = 0
    host: str = "127.0.0.1"
    parent_dir: Path | None = None
    bin_dir: Path = field(default_factory=find_postgres_bin)
    root: Path | None = None

    @property
    def data_dir(self) -> Path:
        if self.root is None:
            raise StackError("the PostgreSQL server is not started")
        return self.root / "data"

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={POSTGRES_OS_USER} dbname=postgres"

    def start(self) -> PostgresServer:
        # A folder of its own under the system temp dir (pytest's are 0700 root: the server user could not enter).
        self.root = Path(tempfile.mkdtemp(prefix="cdcbridge-pg-", dir=self.parent_dir))
        self.root.chmod(0o755)
        _give_to_server_user(self.root)
        self.port = self.port or free_port(self.host)
        self._run(
            [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", POSTGRES_OS_USER, "--auth=trust",
             "-E", "UTF8", "--locale=C", "--no-sync"],
            "initdb",
        )  # fmt: skip
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nlisten_addresses = '{self.host}'\nport = {self.port}\nunix_socket_directories = ''\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 50\n"
            )
        self._run(
            [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.root / "server.log"), "-w",
             "-t", "60", "start"],
            "pg_ctl start",
        )  # fmt: skip
        return self

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            if (self.data_dir / "postmaster.pid").exists():
                self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"], "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, argv: list[str], what: str) -> None:
        completed = subprocess.run(
            _run_as_server_user(argv), capture_output=True, text=True, timeout=120, cwd=self.root, check=False
        )
        if completed.returncode != 0:
            log_file = self.root / "server.log" if self.root else None
            tail = log_file.read_text()[-800:] if log_file and log_file.exists() else ""
            raise StackError(
                f"PostgreSQL {what} failed (exit {completed.returncode}): {completed.stderr.strip()[-800:]} {tail}"
            )
