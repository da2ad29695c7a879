"""`cdcbridge demo` shows its own progress and summary lines and the names of its log files; everything else (the
Spark JVM, child processes, warnings, log records) goes to the log file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from cdcbridge.harness.demo import DemoSummary

_SCRIPT = textwrap.dedent(
    """
    import logging, os, subprocess, sys, warnings
    from pathlib import Path
    from cdcbridge.harness.demo import _terminal_kept_for_echo

    logging.basicConfig(level=logging.INFO)
    print("before")
    with _terminal_kept_for_echo(Path(sys.argv[1])) as echo:
        echo("progress line")
        print("python stdout")
        print("python stderr", file=sys.stderr)
        os.write(2, b"raw fd 2\\n")
        subprocess.run(["sh", "-c", "echo child stdout; echo child stderr >&2"], check=True)
        logging.getLogger("py4j").warning("a log record")
        warnings.warn("a warning")
    print("after")
    print("stderr after", file=sys.stderr)
    """
)


def test_only_the_echoed_lines_reach_the_terminal_and_the_rest_lands_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    result = subprocess.run([sys.executable, "-c", _SCRIPT, str(log)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "before\nprogress line\nafter\n"
    assert result.stderr == "stderr after\n"
    logged = log.read_text()
    for line in ("python stdout", "python stderr", "raw fd 2", "child stdout", "child stderr", "a log record",
                 "a warning"):  # fmt: skip
        assert line in logged
    assert "progress line" not in logged and "after" not in logged


def test_the_summary_names_the_log_files_under_the_work_folder(tmp_path: Path) -> None:
    logs = [tmp_path / "demo.log", tmp_path / "stack" / "kafka.log", tmp_path / "demo-worker-1.log"]
    lines = DemoSummary(operations=10, rows_in_source=3, rows_in_target=3, logs=logs).lines()
    assert lines[-4:] == [f"logs                   {tmp_path}/", "  demo.log", "  stack/kafka.log",
                          "  demo-worker-1.log"]  # fmt: skip
    assert not any(line.startswith("logs") for line in DemoSummary().lines())


def test_demo_config_is_a_valid_run_configuration_and_takes_apply_settings(tmp_path) -> None:
    from cdcbridge.config import BridgeConfig
    from cdcbridge.harness.demo import demo_config
    from cdcbridge.harness.stack.stack import StackEndpoints

    endpoints = StackEndpoints(emulator_url="http://127.0.0.1:1", kafka_bootstrap="127.0.0.1:2",
                               registry_url="http://127.0.0.1:3")  # fmt: skip
    config = BridgeConfig.model_validate(
        demo_config(tmp_path, endpoints, table="trickle", topic_prefix="trickle", apply={"trigger_seconds": 2.5})
    )
    assert [t.name for t in config.source.tables] == ["trickle"]
    assert config.kafka.topic_prefix == "trickle"
    assert config.apply.trigger_seconds == 2.5
    assert config.apply.prefer_format == "MUTATE_LOG"
