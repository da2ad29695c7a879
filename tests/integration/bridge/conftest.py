"""The emulator shared by the bridge process tests (in this process; the workers are separate processes)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdcbridge.emulator.server import EmulatorServer
from tests.integration.bridge_helpers import ACCESS_KEY_ID, ACCESS_KEY_SECRET


@pytest.fixture(scope="package")
def emulator() -> Iterator[EmulatorServer]:
    # Increments as INCREMENT cells: an update then becomes several MUTATE_LOG messages (sub-sequences).
    server = EmulatorServer(
        host="127.0.0.1", port=0, credentials={ACCESS_KEY_ID: ACCESS_KEY_SECRET}, increments_as_deltas=True
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()
