"""Where the stack keeps downloaded artifacts (a cache) and running state (pid files, logs, data)."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root when running from a checkout (editable install), where deploy/ holds the Maven poms.
REPO_ROOT = Path(__file__).resolve().parents[3]


def deploy_dir() -> Path:
    return Path(os.environ.get("CDCBRIDGE_DEPLOY_DIR", REPO_ROOT / "deploy"))


def cache_dir() -> Path:
    """Downloaded JVM artifacts; git-ignored; survives between runs so the second run fetches nothing."""
    return Path(os.environ.get("CDCBRIDGE_CACHE_DIR", REPO_ROOT / ".cache"))


def default_state_dir() -> Path:
    return Path(os.environ.get("CDCBRIDGE_STATE_DIR", REPO_ROOT / ".state" / "stack"))
