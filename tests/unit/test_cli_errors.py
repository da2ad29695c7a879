"""`cdcbridge` errors: one redacted line by default, a redacted traceback with --debug."""

from __future__ import annotations

import sys

import click
import pytest
from urllib3 import HTTPConnectionPool
from urllib3.connection import HTTPConnection
from urllib3.exceptions import MaxRetryError, NewConnectionError

from cdcbridge import cli
from cdcbridge.observability.redaction import register_secret

SECRET = "cli-errors-s3cr3t-value"


@pytest.mark.parametrize("debug", [False, True])
def test_an_error_never_prints_a_registered_secret(
    debug: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    register_secret(SECRET)

    def failing_main(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"cannot connect with password {SECRET}")

    monkeypatch.setattr(cli.cli, "main", failing_main)
    monkeypatch.setattr(sys, "argv", ["cdcbridge", *(["--debug"] if debug else []), "status"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 1
    stderr = capsys.readouterr().err
    assert SECRET not in stderr
    assert "cannot connect with password" in stderr
    assert ("Traceback (most recent call last)" in stderr) is debug


def test_click_usage_errors_keep_their_own_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    def usage_error(*args: object, **kwargs: object) -> None:
        raise click.UsageError("no such option: --nope")

    monkeypatch.setattr(cli.cli, "main", usage_error)
    monkeypatch.setattr(sys, "argv", ["cdcbridge", "status", "--nope"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2


def _refused(host: str, port: int) -> MaxRetryError:
    """What urllib3 (under the tablestore SDK) raises when nothing listens at host:port."""
    refused = NewConnectionError(HTTPConnection(host, port), "Failed to establish a new connection: [Errno 111] "
                                 "Connection refused")  # fmt: skip
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    return MaxRetryError(HTTPConnectionPool(host, port), "/DescribeTable", refused)


def _wrapped(cause: BaseException) -> Exception:
    try:
        try:
            raise cause
        except BaseException as error:
            raise RuntimeError(f"could not describe the status table ('cdcbridge_status'): {error!r}") from error
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize(
    ("endpoints", "expected"),
    [
        ({"source.endpoint": "http://127.0.0.1:8900"}, "check source.endpoint"),
        (
            {"source.endpoint": "http://ots.example:80", "apply.tablestore_endpoint": "http://127.0.0.1:8900/"},
            "check apply.tablestore_endpoint",
        ),
    ],
)
def test_an_unreachable_configured_endpoint_is_said_in_one_sentence_with_its_setting(
    endpoints: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = {cli._endpoint_key(url): setting for setting, url in endpoints.items()}
    monkeypatch.setattr(cli, "_TABLESTORE_ENDPOINTS", known)
    line = cli._error_line(_wrapped(_refused("127.0.0.1", 8900)))
    assert line == f"cannot reach Tablestore at http://127.0.0.1:8900 (connection refused): {expected} and that " \
        "Tablestore runs there"  # fmt: skip


def test_other_failures_keep_their_own_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint the configuration does not name, or a local OSError, is not reported as an unreachable Tablestore."""
    monkeypatch.setattr(cli, "_TABLESTORE_ENDPOINTS", {cli._endpoint_key("http://127.0.0.1:8900"): "source.endpoint"})
    elsewhere = _wrapped(_refused("127.0.0.1", 8081))
    assert cli._error_line(elsewhere) == str(elsewhere)
    local = _wrapped(PermissionError(13, "Permission denied"))
    assert cli._error_line(local) == str(local)


def test_secret_named_spark_and_kafka_settings_are_registered_with_the_configs_secrets() -> None:
    from cdcbridge.config import parse_config

    settings = {
        "source": {"tables": [{"name": "t"}]},
        "kafka": {"bootstrap_servers": "k:9092", "security": {"sasl_password": "${KAFKA_PW}"}},
        "apply": {
            "kafka_options": {"sasl.password": "opt-pass-1"},
            "spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "${AWS_SECRET}",
                               "spark.hadoop.fs.s3a.session.token": "tok-2", "spark.executor.memory": "1g"}},
        },
    }  # fmt: skip
    config = parse_config(settings, environ={"KAFKA_PW": "kafka-pass-0", "AWS_SECRET": "s3a-secret-3"})
    found = cli._secrets_of(config)
    assert {"kafka-pass-0", "opt-pass-1", "s3a-secret-3", "tok-2"} <= set(found)
    assert "1g" not in found


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["snapshot"], "Missing option '--config'"),
        (["snapshot", "--config", "x.yaml", "--from", "id=1"], "need --table"),
        (["snapshot", "pause", "--config", "x.yaml"], "Missing option '--table'"),
    ],
)
def test_snapshot_options_are_checked_before_anything_is_read(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CDCBRIDGE_CONFIG", raising=False)
    monkeypatch.setattr(sys, "argv", ["cdcbridge", *argv])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2 and message in capsys.readouterr().err
