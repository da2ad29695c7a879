"""Session fixtures: the real services, started once per test run on free ports and stopped at the end."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.stack.spark_cluster import SparkStandaloneCluster
from cdcbridge.harness.stack.stack import LocalStack, StackEndpoints, StackPorts
from tests.integration.bridge_helpers import ACCESS_KEY_ID, ACCESS_KEY_SECRET
from tests.integration.s3_server import S3Server, start_s3_server


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackEndpoints]:
    """Kafka + Apicurio as real processes (the emulator runs in-process where a test needs it)."""
    state_dir = tmp_path_factory.mktemp("stack")
    local = LocalStack(state_dir)
    try:
        yield local.up(StackPorts(0, 0, 0, 0), services=("kafka", "registry"))
    finally:
        # Kafka clients a test left in a reference cycle (a `pytest.raises(...) as error` keeps the test's frame, and
        # so its admin client, alive) go now, while their broker still answers: alive after it stops, their
        # librdkafka threads would print "Connect ... failed" lines after pytest's summary.
        gc.collect()
        local.down()


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorServer]:
    """The emulator in this process, checking signatures with the test credentials; increments recorded as their
    result (the default). Packages that need other options define their own `emulator`."""
    server = EmulatorServer(host="127.0.0.1", port=0, credentials={ACCESS_KEY_ID: ACCESS_KEY_SECRET})
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """An S3-compatible server (moto) on loopback with a bucket, for the tests that ask for it."""
    server, process = start_s3_server(tmp_path_factory.mktemp("s3"))
    try:
        yield server
    finally:
        process.stop(timeout=15)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    from cdcbridge.config import SparkSettings
    from cdcbridge.harness.stack.spark import local_spark_session

    warehouse: Path = tmp_path_factory.mktemp("spark-warehouse")
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    settings = SparkSettings(master="local[2]", conf={"spark.sql.warehouse.dir": str(warehouse)})
    session = local_spark_session("cdcbridge-tests", settings)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandaloneCluster]:
    """A Spark standalone master and one worker (1 core, 1 GB for executors) on loopback, started only when a test
    asks for it."""
    with SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), cores=1, memory="1g") as cluster:
        yield cluster
