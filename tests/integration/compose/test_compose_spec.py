"""docker-compose.yml against the Compose Specification, with compose-go (the loader Docker Compose v2 uses): every
profile's services must load. The checker (tests/compose_check, pinned by go.mod / go.sum) is built once into the
cache (.cache/go: binary, module and build caches) and rebuilt only when its sources change."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cdcbridge.harness.stack.paths import cache_dir

ROOT = Path(__file__).resolve().parents[3]
CHECKER = ROOT / "tests" / "compose_check"
GO_INSTALL_HINT = (
    "Go 1.24 or newer is needed to validate docker-compose.yml with compose-go: install it (`make system-deps` "
    "installs the Debian package golang-go; an older Go 1.21+ fetches the 1.24 toolchain by itself) or put it on PATH"
)


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        pytest.fail(GO_INSTALL_HINT, pytrace=False)
    return go


def _checker_binary() -> Path:
    """The built checker, named by the hash of its sources, so a change of them (or of the pins) rebuilds it."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((CHECKER / name).read_bytes())
    go_cache = cache_dir() / "go"
    binary = go_cache / "bin" / f"compose_check-{digest.hexdigest()[:16]}"
    if binary.exists():
        return binary
    env = {**os.environ, "GOMODCACHE": str(go_cache / "mod"), "GOCACHE": str(go_cache / "build"),
           "GOFLAGS": "-mod=readonly -modcacherw"}  # fmt: skip
    built = subprocess.run([_go(), "build", "-o", str(binary), "."], cwd=CHECKER, env=env, capture_output=True,
                           text=True, timeout=1200)  # fmt: skip
    assert built.returncode == 0, f"building the compose checker failed ({GO_INSTALL_HINT}):\n{built.stderr}"
    return binary


def test_every_profile_of_docker_compose_yml_loads_with_compose_go() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TABLESTORE_", "COMPOSE_"))}
    result = subprocess.run([str(_checker_binary()), str(ROOT / "docker-compose.yml")], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    loaded = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert set(loaded) == {"no profile", "profile monitoring", "profile traffic"}
    assert "create-tables" in loaded["no profile"] and "traffic" not in loaded["no profile"]
    assert "traffic" in loaded["profile traffic"]


def test_the_checker_reports_what_the_loader_refuses(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    text = (ROOT / "docker-compose.yml").read_text()
    broken.write_text(text.replace("stop_grace_period: 45s", "stop_grace_periode: 45s", 1))
    (tmp_path / "deploy").symlink_to(ROOT / "deploy")
    result = subprocess.run([str(_checker_binary()), str(broken)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "stop_grace_periode" in result.stderr
