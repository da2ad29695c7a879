"""Errors of the observability layer (metrics endpoint, logging setup)."""

from __future__ import annotations


class ObservabilityError(Exception):
    """Base of every observability error; the message names the setting and the fix."""


class MetricsServerError(ObservabilityError):
    """The Prometheus endpoint could not be started (port taken, address not local, ...)."""


class LoggingConfigError(ObservabilityError):
    """An unknown log level or log format was asked for."""
