"""Process logging: one root handler, text or JSON lines, secrets masked, noisy third-party loggers quieted.

Every cdcbridge module logs through ``logging.getLogger(__name__)``; a process entry point (``cdcbridge run``,
``apply``, ``emulator`` ...) calls :func:`configure_logging` once. Redaction happens twice: a filter on the handler
masks the record itself (message, %-args, traceback, stack, string extras) before any formatter sees it, and the
formatter masks its finished line again, which catches secrets inside non-string extras.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from pythonjsonlogger.json import JsonFormatter as _PythonJsonFormatter

from cdcbridge.observability.errors import LoggingConfigError
from cdcbridge.observability.redaction import (
    SecretRedactor,
    default_redactor,
    redact,
    register_connection_secret,
    register_secret,
)

__all__ = [
    "LOG_FORMATS",
    "NOISY_LOGGERS",
    "JsonLogFormatter",
    "RedactionFilter",
    "TextLogFormatter",
    "configure_logging",
    "quiet_noisy_loggers",
    "redact",
    "register_connection_secret",
    "register_secret",
]

LOG_FORMATS = ("text", "json")
_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}
_LEVELS |= {"WARN": logging.WARNING, "CRITICAL": logging.CRITICAL}

#: Third-party loggers that are loud, and the level they are held at unless the log level is DEBUG. The tablestore SDK
#: logs every failed request at ERROR and raises it too: we map that error to our own message, so its line would only
#: repeat it (in a worse form) beside ours. py4j chatters through every Spark call; urllib3 warns on each retry.
NOISY_LOGGERS: dict[str, int] = {
    "tablestore": logging.CRITICAL,
    "tablestore-client": logging.CRITICAL,
    "py4j": logging.ERROR,
    "urllib3": logging.ERROR,
}

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_RECORD_ATTRS = frozenset(vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def _utc_timestamp(created: float) -> str:
    return datetime.fromtimestamp(created, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RedactionFilter(logging.Filter):
    """Masks secrets in a record before it is formatted. Install on a handler: handler filters see every record
    that reaches the handler, logger filters only the records logged on that very logger."""

    def __init__(self, redactor: SecretRedactor | None = None) -> None:
        super().__init__()
        self._redactor = redactor or default_redactor
        self._exception_formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a wrong %-format must not raise out of the log call, nor print raw args elsewhere
            message = f"{record.msg!s} (unformattable log arguments: {record.args!r})"
        record.msg = self._redactor.redact(message)
        record.args = None
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self._exception_formatter.formatException(record.exc_info)
            # Drop the live exception: formatters would re-render its unmasked traceback; exc_text carries it.
            record.exc_info = None
        if record.exc_text:
            record.exc_text = self._redactor.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self._redactor.redact(record.stack_info)
        for key, value in vars(record).items():
            if key not in _STANDARD_RECORD_ATTRS and isinstance(value, str):
                setattr(record, key, self._redactor.redact(value))
        return True


class TextLogFormatter(logging.Formatter):
    """``2025-01-02T03:04:05.678Z INFO  cdcbridge.bridge.app: message``: one line per event (plus a traceback)."""

    def __init__(self, redactor: SecretRedactor | None = None) -> None:
        super().__init__("%(asctime)s %(levelname)-5s %(name)s: %(message)s")
        self._redactor = redactor or default_redactor

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _utc_timestamp(record.created)

    def format(self, record: logging.LogRecord) -> str:
        return self._redactor.redact(super().format(record))


class JsonLogFormatter(_PythonJsonFormatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, then any ``extra=`` fields and
    ``exc_info`` / ``stack_info`` when present."""

    def __init__(self, redactor: SecretRedactor | None = None) -> None:
        super().__init__(fmt=[], json_default=str)
        self._redactor = redactor or default_redactor

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        log_data["ts"] = _utc_timestamp(record.created)
        log_data["level"] = record.levelname
        log_data["logger"] = record.name
        log_data["message"] = record.message
        super().add_fields(log_data, record, message_dict)

    def format(self, record: logging.LogRecord) -> str:
        return self._redactor.redact(super().format(record))


class _CdcbridgeHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the root handler this module installed, so configuring again replaces it instead of adding one."""


def _parse_level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    try:
        return _LEVELS[level.strip().upper()]
    except KeyError:
        raise LoggingConfigError(
            f"unknown log level {level!r}: set observability.log_level to one of DEBUG, INFO, WARNING, ERROR"
        ) from None


def quiet_noisy_loggers(level: str | int = "INFO") -> None:
    """Hold :data:`NOISY_LOGGERS` at their quiet levels, or let them inherit again when ``level`` is DEBUG."""
    quiet = _parse_level(level) > logging.DEBUG
    for name, quiet_level in NOISY_LOGGERS.items():
        logging.getLogger(name).setLevel(quiet_level if quiet else logging.NOTSET)


def configure_logging(level: str | int = "INFO", fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """Install (or replace) the process's root log handler and return it.

    ``fmt``: ``text`` or ``json``; ``stream``: defaults to the current ``sys.stderr``. Safe to call again (the CLI
    reconfigures once the config file is read): the previous cdcbridge handler is removed, others are kept.
    """
    numeric_level = _parse_level(level)
    if fmt not in LOG_FORMATS:
        raise LoggingConfigError(f"unknown log format {fmt!r}: set observability.log_format to 'text' or 'json'")
    handler = _CdcbridgeHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonLogFormatter() if fmt == "json" else TextLogFormatter())
    handler.addFilter(RedactionFilter())
    root = logging.getLogger()
    for previous in [h for h in root.handlers if isinstance(h, _CdcbridgeHandler)]:
        root.removeHandler(previous)
        previous.close()
    root.addHandler(handler)
    root.setLevel(numeric_level)
    quiet_noisy_loggers(numeric_level)
    # warnings.warn(...) output then goes through the handler too, and so through redaction.
    logging.captureWarnings(True)
    return handler
