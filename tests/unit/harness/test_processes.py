"""The one process helper: detached services (pid records) and the children a run owns (workers, an emulator)."""

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from cdcbridge.harness.processes import (
    BridgeWorkerProcess,
    ChildProcess,
    EmulatorProcess,
    ProcessError,
    ProcessRecord,
    RecordingWorkerProcess,
    free_port,
    require_free_port,
    start_service,
)
from cdcbridge.harness.recording_worker import WorkerOptions
from cdcbridge.harness.recording_worker import main as recording_worker_main

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
    with pytest.raises(ProcessError) as error:
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
    with pytest.raises(ProcessError) as error:
        start_service("kafka", argv, state_dir=tmp_path, endpoint="none", ready=lambda: False, timeout=10)
    message = str(error.value)
    assert "Error starting LogManager | java.lang.OutOfMemoryError: Java heap space" in message
    assert "Frame" not in message and "... 4 more" not in message


def test_a_process_that_never_answers_is_stopped_and_reported(tmp_path: Path) -> None:
    with pytest.raises(ProcessError, match=r"sleeper did not answer at http://x within 1s"):
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
        with pytest.raises(ProcessError, match=rf"Kafka cannot start: port 127.0.0.1:{port} is busy"):
            require_free_port("Kafka", "127.0.0.1", port)
    require_free_port("Kafka", "127.0.0.1", free_port())


# ----- children -----------------------------------------------------------------------------------------------------

#: Prints a line a tick until SIGTERM, then says so and exits 0 (a worker's graceful stop, in small).
TICKER = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("draining", flush=True), sys.exit(0)))
n = 0
while True:
    n += 1
    print(f"tick {n}", flush=True)
    time.sleep(0.05)
"""


def _ticker(tmp_path: Path, name: str = "ticker") -> ChildProcess:
    return ChildProcess(name, [sys.executable, "-c", TICKER], tmp_path / f"{name}.log")


def test_a_child_logs_to_its_file_and_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    child = _ticker(tmp_path).start()
    try:
        matches = child.wait_for_log(r"tick (\d+)", count=3, timeout=20)
        assert [m.group(1) for m in matches] == ["1", "2", "3"]
        assert child.alive and child.returncode is None
    finally:
        assert child.stop(timeout=20) == 0
    assert not child.alive
    assert "draining" in child.log_tail(2)


def test_kill_is_sigkill_and_returns_the_wall_time_of_the_kill(tmp_path: Path) -> None:
    child = _ticker(tmp_path).start()
    child.wait_for_log("tick 1", timeout=20)
    before = time.time()
    killed_at = child.kill()
    assert before <= killed_at <= time.time()
    assert child.returncode == -signal.SIGKILL
    assert "draining" not in child.log()  # no graceful part


def test_a_frozen_child_makes_no_progress_until_thawed_and_stop_wakes_it_first(tmp_path: Path) -> None:
    child = _ticker(tmp_path).start()
    try:
        child.wait_for_log("tick 2", timeout=20)
        child.freeze()
        assert child.frozen
        time.sleep(0.3)  # a stopped process cannot have a write in flight after this
        frozen_log = child.log()
        time.sleep(0.5)
        assert child.log() == frozen_log
        child.thaw()
        assert not child.frozen
        ticks = frozen_log.count("tick")
        child.wait_for_log("tick", count=ticks + 2, timeout=20)
        child.freeze()
    finally:
        assert child.stop(timeout=20) == 0  # SIGCONT before SIGTERM, else a stopped process never drains


def test_a_restart_appends_to_the_same_log(tmp_path: Path) -> None:
    child = ChildProcess("echo", [sys.executable, "-c", "print('run', flush=True)"], tmp_path / "echo.log")
    assert child.start().wait(20) == 0
    assert child.start().wait(20) == 0
    assert child.log().splitlines() == ["run", "run"]


def test_waits_fail_naming_the_process_and_its_log(tmp_path: Path) -> None:
    quitter = ChildProcess("quitter", [sys.executable, "-c", "print('bye', flush=True)"], tmp_path / "q.log").start()
    with pytest.raises(ProcessError, match=r"(?s)quitter ended \(exit code 0\) before its log showed 1× /never/.*bye"):
        quitter.wait_for_log("never", timeout=20)
    child = _ticker(tmp_path).start()
    try:
        with pytest.raises(ProcessError, match=r"ticker did not exit within 0s"):
            child.wait(0.2)
        with pytest.raises(ProcessError, match=r"(?s)timed out after 0s waiting for 1× /never/ .*tick"):
            child.wait_for_log("never", timeout=0.3)
        with pytest.raises(ProcessError, match="running already"):
            child.start()
    finally:
        child.ensure_dead()
    assert not child.alive
    with pytest.raises(ProcessError, match="ghost was not started"):
        ChildProcess("ghost", ["true"], tmp_path / "ghost.log").wait(1)


def test_a_bridge_worker_runs_cdcbridge_run_with_its_config_and_id(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    worker = BridgeWorkerProcess(missing, "w-1", tmp_path / "w-1.log").start()
    assert worker.wait(120) != 0
    assert worker.argv[-5:] == ["run", "--config", str(missing), "--worker-id", "w-1"]
    assert str(missing) in worker.log()  # the CLI's one-line reason names the file it could not read


def test_an_emulator_child_reports_its_url_and_answers_admin_calls(tmp_path: Path) -> None:
    emulator = EmulatorProcess(tmp_path / "emulator.log")
    try:
        emulator.start(timeout=120)
        assert emulator.url.startswith("http://127.0.0.1:")
        assert emulator.admin.url == emulator.url
        assert emulator.admin.health() == {"status": "ok", "tables": 0}
    finally:
        emulator.stop(timeout=20)
    assert emulator.returncode == 0  # SIGTERM stops it cleanly


def test_recording_worker_options_become_a_command_line_its_cli_reads_back(tmp_path: Path) -> None:
    options = WorkerOptions(timings="default", settings={"take_interval_seconds": 2.5}, checkpoint_every=3,
                            ack_delay=0.5, process_delay=0.25, shutdown_delay=1.0, version_column="ver",
                            start_at=1234.5)  # fmt: skip
    argv = options.argv(endpoint="http://e", table="t", status_table="s", worker_id="w", db=tmp_path / "w.sqlite")
    assert argv[1:3] == ["-m", "cdcbridge.harness.recording_worker"]
    params = recording_worker_main.make_context("recording_worker", argv[3:]).params
    assert params == {
        "endpoint": "http://e", "instance": "cdcbridge", "access_key_id": "emulator-id",
        "access_key_secret": "emulator-secret", "table": "t", "status_table": "s", "worker_id": "w",
        "db": tmp_path / "w.sqlite", "timings": "default", "settings_json": '{"take_interval_seconds": 2.5}',
        "checkpoint_every": 3, "ack_delay": 0.5, "process_delay": 0.25, "shutdown_delay": 1.0,
        "version_column": "ver", "start_at": 1234.5,
    }  # fmt: skip


def test_a_recording_worker_never_reuses_a_journal(tmp_path: Path) -> None:
    def argv_of(db: Path) -> list[str]:
        return [sys.executable, "-c", f"open({str(db)!r}, 'w').close()"]

    first = RecordingWorkerProcess("w1", tmp_path, argv_of).start()
    assert first.wait(20) == 0 and first.db == tmp_path / "w1.sqlite" and first.db.exists()
    assert first.log_path == tmp_path / "w1.log"
    with pytest.raises(ProcessError, match=r"journal .*w1\.sqlite exists: give every worker process its own id"):
        RecordingWorkerProcess("w1", tmp_path, argv_of).start()
