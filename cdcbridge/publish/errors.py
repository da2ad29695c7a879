"""Errors of setting up what a process publishes."""

from __future__ import annotations


class BridgeStartError(Exception):
    """The bridge cannot start; the message names the table/topic/setting and the fix."""
