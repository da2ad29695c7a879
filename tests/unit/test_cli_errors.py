"""`cdcbridge` errors: one redacted line by default, a redacted traceback with --debug."""

from __future__ import annotations

import sys

import click
import pytest

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
