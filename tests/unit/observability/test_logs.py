"""Logging: text and JSON lines with the expected fields, secrets masked everywhere, one handler however often
configured, noisy third-party loggers quiet."""

from __future__ import annotations

import io
import json
import logging
import re
import warnings
from collections.abc import Iterator

import pytest

from cdcbridge.observability import logs
from cdcbridge.observability.errors import LoggingConfigError
from cdcbridge.observability.logs import NOISY_LOGGERS, configure_logging, register_secret
from cdcbridge.observability.redaction import default_redactor, register_connection_secret

SECRET = "Ts-Access-Secret-9f8e7d"
STS_TOKEN = "CAIS-sts-token-0a1b2c3d"
PG_PASSWORD = "Pg-Pass-7q6w5e"
log = logging.getLogger("cdcbridge.tests.observability")


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Every test leaves the root logger, the noisy loggers and the secret registry as it found them."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    noisy = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    showwarning = warnings.showwarning
    yield
    logging.captureWarnings(False)
    warnings.showwarning = showwarning
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    for name, noisy_level in noisy.items():
        logging.getLogger(name).setLevel(noisy_level)
    default_redactor.clear()


def _configure(fmt: str, level: str = "DEBUG") -> io.StringIO:
    stream = io.StringIO()
    configure_logging(level, fmt, stream)
    return stream


def _json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_text_lines_carry_time_level_logger_and_message() -> None:
    stream = _configure("text", "INFO")
    log.info("took lease %s at epoch %d", "shard-1", 3)
    log.debug("not shown at INFO")
    timestamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    expected = rf"{timestamp} INFO  cdcbridge\.tests\.observability: took lease shard-1 at epoch 3\n"
    assert re.fullmatch(expected, stream.getvalue())


def test_json_lines_carry_ts_level_logger_message_and_extras() -> None:
    stream = _configure("json", "INFO")
    log.warning("lag %s", "high", extra={"table": "orders", "shard": "s1", "lag_records": 1200, "when": object()})
    (line,) = _json_lines(stream)
    assert list(line)[:4] == ["ts", "level", "logger", "message"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(line["ts"]))
    assert line["level"] == "WARNING"
    assert line["logger"] == "cdcbridge.tests.observability"
    assert line["message"] == "lag high"
    assert line["table"] == "orders" and line["shard"] == "s1" and line["lag_records"] == 1200
    assert str(line["when"]).startswith("<object object")  # anything not JSON is written as its str


def test_json_exceptions_are_one_line_with_the_traceback_in_a_field() -> None:
    stream = _configure("json")
    try:
        raise ValueError("bad shard")
    except ValueError:
        log.exception("apply failed")
    (line,) = _json_lines(stream)
    assert line["message"] == "apply failed"
    assert "Traceback (most recent call last)" in str(line["exc_info"])
    assert "ValueError: bad shard" in str(line["exc_info"])


def _log_secrets_every_way() -> None:
    register_secret(SECRET)
    register_secret(STS_TOKEN)
    register_connection_secret(f"postgresql://app:{PG_PASSWORD}@db:5432/cdc")
    log.info(f"plain message with {SECRET}")
    log.info("args %s and %r", SECRET, {"token": STS_TOKEN})
    log.info("named %(secret)s", {"secret": SECRET})
    log.info("shapes password=hunter2x sasl.password=kafka-pw-1 http://alice:reg-pw-2@registry:8080/apis")
    log.info("headers %s", {"Authorization": "OTS LTAI5tKeyId:c2lnbmF0dXJlLWJhc2U2NA==", "x-ots-ststoken": "tok-3x"})
    log.info("extras", extra={"dsn": f"host=db password={PG_PASSWORD}", "conf": {"sasl.password": "kafka-pw-1"}})
    log.info("the stack", stack_info=True, extra={"note": SECRET})
    try:
        raise ConnectionError(f"cannot reach postgresql://app:{PG_PASSWORD}@db/cdc with secret {SECRET}")
    except ConnectionError:
        log.exception("connect failed with token %s", STS_TOKEN)
    try:
        try:
            raise KeyError(SECRET)
        except KeyError as inner:
            raise RuntimeError("wrapped password=hunter2x") from inner
    except RuntimeError as exc:
        log.error("chained", exc_info=exc)
    log.info("bad format %s %s", SECRET)  # a wrong %-format must not raise nor leak
    warnings.warn(f"deprecated option carried {SECRET}", UserWarning, stacklevel=1)


LEAKS = (SECRET, STS_TOKEN, PG_PASSWORD, "hunter2x", "kafka-pw-1", "reg-pw-2", "c2lnbmF0dXJl", "tok-3x", "alice:")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_secret_reaches_the_output_in_either_format(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest's own capture handler sits before ours and would fail the test on the deliberately bad %-format.
    monkeypatch.setattr(logging, "raiseExceptions", False)
    stream = _configure(fmt)
    _log_secrets_every_way()
    output = stream.getvalue()
    for leak in LEAKS:
        assert leak not in output, f"{leak!r} leaked in {fmt} output"
    assert output.count("***") >= 15
    # The lines are still useful: what happened is there, only the secret values are gone.
    assert "connect failed with token ***" in output
    assert "ConnectionError: cannot reach postgresql://***@db/cdc with secret ***" in output
    assert "OTS ***" in output
    assert "deprecated option carried ***" in output
    assert "bad format" in output
    if fmt == "json":
        lines = {line["message"]: line for line in _json_lines(stream)}  # masking keeps every line valid JSON
        assert "RuntimeError: wrapped password=***" in str(lines["chained"]["exc_info"])
        assert lines["extras"]["conf"] == {"sasl.password": "***"}
        assert lines["extras"]["dsn"] == "host=db password=***"


def test_secrets_registered_after_configuring_are_masked_too() -> None:
    stream = _configure("text")
    log.info("before %s", "Late-Secret-123")
    register_secret("Late-Secret-123")
    log.info("after %s", "Late-Secret-123")
    first, second = stream.getvalue().splitlines()
    assert first.endswith("before Late-Secret-123")
    assert second.endswith("after ***")


def test_configuring_twice_replaces_the_handler_and_keeps_foreign_ones() -> None:
    root = logging.getLogger()
    foreign = logging.NullHandler()
    root.addHandler(foreign)
    first = _configure("text")
    second = _configure("json")
    third = _configure("text", "WARNING")
    ours = [handler for handler in root.handlers if isinstance(handler, logs._CdcbridgeHandler)]
    assert len(ours) == 1
    assert foreign in root.handlers
    log.warning("once")
    assert first.getvalue() == "" and second.getvalue() == ""
    assert third.getvalue().count("once") == 1
    assert root.level == logging.WARNING


def test_stream_defaults_to_the_current_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", "text")
    log.info("to stderr")
    assert "to stderr" in capsys.readouterr().err


def test_noisy_third_party_loggers_are_quiet_unless_debug() -> None:
    stream = _configure("text", "INFO")
    for name, quiet_level in NOISY_LOGGERS.items():
        assert logging.getLogger(name).level == quiet_level
    logging.getLogger("urllib3.connectionpool").warning("Retrying after connection broken")
    logging.getLogger("py4j.clientserver").info("Received command c on object id p0")
    # The SDK logs each failed request and raises it too; we report the raised error, so its own line is dropped.
    logging.getLogger("tablestore-client").error("OTS request failed, API: DescribeTable, HTTPStatus: 403")
    logging.getLogger("tablestore.client").error("OTS request failed")
    logging.getLogger("py4j.java_gateway").error("An error occurred while trying to connect to the Java server")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith("py4j.java_gateway: An error occurred while trying to connect to the "
                                                 "Java server")  # fmt: skip

    stream = _configure("text", "DEBUG")
    for name in NOISY_LOGGERS:
        assert logging.getLogger(name).level == logging.NOTSET
    logging.getLogger("tablestore-client").error("OTS request failed, API: DescribeTable, HTTPStatus: 403")
    assert "OTS request failed" in stream.getvalue()


def test_the_sdk_native_codec_notice_is_dropped_at_every_level_but_its_other_lines_are_not() -> None:
    """`import cdcbridge` installs the filter: the notice says nothing a user can act on, even when debugging."""
    stream = _configure("text", "DEBUG")
    logging.getLogger("tablestore.encoder").warning("Native C++ encoder not available, using Python implementation")
    logging.getLogger("tablestore.decoder").warning("Native PlainBuffer parser module not found, using Python "
                                                    "implementation")  # fmt: skip
    logging.getLogger("tablestore.encoder").warning("Encoding failed for column c")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith("tablestore.encoder: Encoding failed for column c")


def test_unknown_level_or_format_names_the_setting() -> None:
    with pytest.raises(LoggingConfigError, match=r"'LOUD'.*observability\.log_level"):
        configure_logging("LOUD")
    with pytest.raises(LoggingConfigError, match=r"'xml'.*observability\.log_format"):
        configure_logging("INFO", "xml")


def test_levels_are_case_insensitive_and_numeric_levels_work() -> None:
    configure_logging("warning", "text", io.StringIO())
    assert logging.getLogger().level == logging.WARNING
    configure_logging(logging.DEBUG, "text", io.StringIO())
    assert logging.getLogger().level == logging.DEBUG
