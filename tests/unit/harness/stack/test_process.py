import os
import socket
import sys
from pathlib import Path

import pytest

from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.process import ProcessRecord, free_port, require_free_port, start_service

SLEEPER = [sys.executable, "-c", "import time; print('sleeping', flush=True); time.sleep(60)"]


def test_start_waits_for_readiness_and_stop_kills_only_that_process(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    calls = []

    def ready() -> bool:
        calls.append(1)
        if len(calls) >= 3:
            marker.touch()
        return marker.exists()

    record = start_service("sleeper", SLEEPER, state_dir=tmp_path, endpoint="none", ready=ready, timeout=10)
    assert record.is_running()
    assert len(calls) >= 3
    loaded = ProcessRecord.load(tmp_path, "sleeper")
    assert loaded == record
    assert loaded.stop(tmp_path) is True
    assert not record.is_running()
    assert ProcessRecord.load(tmp_path, "sleeper") is None


def test_a_process_that_dies_on_start_names_its_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('boom: bad config', flush=True); sys.exit(3)"]
    with pytest.raises(StackError) as error:
        start_service("broken", argv, state_dir=tmp_path, endpoint="none", ready=lambda: False, timeout=10)
    message = str(error.value)
    assert "broken exited with code 3" in message
    assert str(tmp_path / "broken.log") in message
    assert "boom: bad config" in message
    assert ProcessRecord.load(tmp_path, "broken") is None


def test_a_jvm_that_dies_on_start_is_reported_by_its_error_not_its_stack_frames(tmp_path: Path) -> None:
    log = "\n".join(
        [
            "INFO Starting the log cleaner",
            "ERROR Encountered fatal fault: Error starting LogManager",
            "java.lang.OutOfMemoryError: Java heap space",
            *[f"\tat org.apache.kafka.Frame{i}.run(Frame{i}.java:{i})" for i in range(12)],
            "\t... 4 more",
        ]
    )
    argv = [sys.executable, "-c", f"import sys; print({log!r}, flush=True); sys.exit(1)"]
    with pytest.raises(StackError) as error:
        start_service("kafka", argv, state_dir=tmp_path, endpoint="none", ready=lambda: False, timeout=10)
    message = str(error.value)
    assert "Error starting LogManager | java.lang.OutOfMemoryError: Java heap space" in message
    assert "Frame" not in message and "... 4 more" not in message


def test_a_process_that_never_answers_is_stopped_and_reported(tmp_path: Path) -> None:
    with pytest.raises(StackError, match=r"sleeper did not answer at http://x within 1s"):
        start_service("sleeper", SLEEPER, state_dir=tmp_path, endpoint="http://x", ready=lambda: False, timeout=1)
    assert ProcessRecord.load(tmp_path, "sleeper") is None


def test_a_recycled_pid_is_not_taken_for_our_process(tmp_path: Path) -> None:
    record = ProcessRecord("ghost", os.getpid(), start_time=1, log="x", endpoint="y")
    assert not record.is_running()
    record.save(tmp_path)
    assert record.stop(tmp_path) is False  # never signals a process it did not start
    assert os.getpid() > 0


def test_busy_port_is_a_one_line_error_naming_the_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(StackError, match=rf"Kafka cannot start: port 127.0.0.1:{port} is busy"):
            require_free_port("Kafka", "127.0.0.1", port)
    require_free_port("Kafka", "127.0.0.1", free_port())
