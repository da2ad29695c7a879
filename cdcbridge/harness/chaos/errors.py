"""Errors of the chaos harness itself (not findings: those go into the report)."""

from __future__ import annotations


class ChaosError(RuntimeError):
    """The harness could not do its part (a process did not start, a condition was not reached in time, the
    topic could not be read); the message says which, and where the logs are."""
