"""Finding Debian's PostgreSQL binaries for the throw-away test server (no server started here)."""

from __future__ import annotations

import pytest

from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.postgres import PostgresServer, find_postgres_bin


def test_the_newest_version_with_initdb_and_pg_ctl_wins(tmp_path) -> None:
    for version, tools in (("9", ("initdb", "pg_ctl")), ("15", ("initdb", "pg_ctl")), ("16", ("initdb",))):
        folder = tmp_path / "lib" / "postgresql" / version / "bin"
        folder.mkdir(parents=True)
        for tool in tools:
            (folder / tool).write_text("")
    assert find_postgres_bin(f"{tmp_path}/lib/postgresql/*/bin") == tmp_path / "lib/postgresql/15/bin"


def test_missing_binaries_say_how_to_install_them(tmp_path) -> None:
    with pytest.raises(StackError, match="apt-get install -y postgresql"):
        find_postgres_bin(f"{tmp_path}/*/bin")


def test_a_server_not_started_has_no_data_dir(tmp_path) -> None:
    server = PostgresServer(port=5999, bin_dir=tmp_path)
    assert server.dsn == "host=127.0.0.1 port=5999 user=postgres dbname=postgres"
    with pytest.raises(StackError, match="not started"):
        _ = server.data_dir
    server.stop()  # stopping a server that never started is harmless
