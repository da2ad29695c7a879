"""The emulator shared by the bad-input process tests (in this process; workers are separate processes)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdcbridge.emulator.server import EmulatorServer
from tests.integration.bridge_helpers import ACCESS_KEY_ID, ACCESS_KEY_SECRET


@pytest.fixture(scope="package")
def emulator() -> Iterator[EmulatorServer]:
    server = EmulatorServer(host="127.0.0.1", port=0, credentials={ACCESS_KEY_ID: ACCESS_KEY_SECRET})
    server.start()
    try:
        yield server
    finally:
        server.stop()
