"""Find an installed JDK of a required major version, without hard-coding a path or vendor."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from cdcbridge.harness.stack.errors import StackError

_JVM_ROOTS = (Path("/usr/lib/jvm"), Path("/opt/java"), Path("/usr/local/lib/jvm"))


@dataclass(frozen=True)
class JavaInstall:
    home: Path
    major: int

    @property
    def java(self) -> Path:
        return self.home / "bin" / "java"


def _major_of(home: Path) -> int | None:
    """Read the major version from a JDK's `release` file (JAVA_VERSION="17.0.15" or "25")."""
    release = home / "release"
    if not (home / "bin" / "java").exists() or not release.exists():
        return None
    match = re.search(r'^JAVA_VERSION="(\d+)', release.read_text(errors="replace"), re.MULTILINE)
    return int(match.group(1)) if match else None


def installed_javas() -> list[JavaInstall]:
    """Every JDK we can see: JAVA_HOME, the `java` on PATH, and the usual JVM folders."""
    homes: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        homes.append(Path(os.environ["JAVA_HOME"]))
    on_path = shutil.which("java")
    if on_path:
        homes.append(Path(on_path).resolve().parent.parent)
    for root in _JVM_ROOTS:
        if root.is_dir():
            homes.extend(sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()))
    found: dict[Path, JavaInstall] = {}
    for home in homes:
        home = home.resolve()
        major = _major_of(home)
        if major is not None and home not in found:
            found[home] = JavaInstall(home, major)
    return list(found.values())


def find_java(min_major: int, max_major: int | None = None, purpose: str = "") -> JavaInstall:
    """The lowest installed JDK within [min_major, max_major]: older LTS releases are what the services test on."""
    candidates = [j for j in installed_javas() if j.major >= min_major and (max_major is None or j.major <= max_major)]
    if not candidates:
        seen = ", ".join(f"{j.major} at {j.home}" for j in installed_javas()) or "none"
        wanted = f"{min_major}+" if max_major is None else f"{min_major}..{max_major}"
        raise StackError(
            f"{purpose or 'this service'} needs Java {wanted}; installed JDKs: {seen}. "
            "Install one (e.g. `apt-get install openjdk-17-jdk-headless`) or set JAVA_HOME."
        )
    return min(candidates, key=lambda j: j.major)
