"""The emulator as a process, as users run it (`cdcbridge emulator`), shared by the tests of this package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdcbridge.harness.processes import EmulatorProcess


@pytest.fixture(scope="module")
def emulator_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    process = EmulatorProcess(tmp_path_factory.mktemp("emulator") / "emulator.log").start()
    try:
        yield process
    finally:
        process.stop()
