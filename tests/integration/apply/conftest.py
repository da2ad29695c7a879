"""Fixtures of the apply-job integration tests: a PostgreSQL server for the session (Kafka, the registry and
Spark come from the parent conftest)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdcbridge.harness.stack.postgres import PostgresServer


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()
