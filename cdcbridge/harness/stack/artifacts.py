"""Fetch the JVM pieces from Maven Central through the poms in deploy/ (never a hard-coded download URL).

Each component's files land in `<cache>/jvm/<component>/`; a marker holding a hash of the pom (and of the sources
a component builds, such as the Spark kernel under deploy/spark/src) makes a second run re-use them and a changed
pom or source build again. Maven's own local repository (~/.m2) caches the downloads themselves.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.paths import cache_dir, deploy_dir

#: What the local stack and the apply job always need (`cdcbridge stack fetch`, `make setup`).
COMPONENTS = ("kafka", "apicurio", "spark")
#: Fetched only when a configuration needs them: s3a = hadoop-aws and the AWS SDK bundle (~560 MB), for s3a:// paths.
OPTIONAL_COMPONENTS = ("s3a",)
_MARKER = ".complete"


def component_dir(component: str) -> Path:
    return cache_dir() / "jvm" / component


def _pom_digest(pom: Path) -> str:
    settings = deploy_dir() / "maven-settings.xml"
    digest = hashlib.sha256(pom.read_bytes())
    sources = pom.parent / "src"
    for source in sorted(p for p in sources.rglob("*") if p.is_file()):
        digest.update(str(source.relative_to(sources)).encode() + b"\0" + source.read_bytes())
    if settings.exists():
        digest.update(settings.read_bytes())
    return digest.hexdigest()


def ensure_component(component: str, *, log: Path | None = None) -> Path:
    """Return the folder holding `component`'s jars, running Maven first if they are missing or stale."""
    if component not in COMPONENTS + OPTIONAL_COMPONENTS:
        known = ", ".join(COMPONENTS + OPTIONAL_COMPONENTS)
        raise StackError(f"unknown JVM component {component!r}; known: {known}")
    target = component_dir(component)
    pom = deploy_dir() / component / "pom.xml"
    if not pom.exists():
        raise StackError(f"Maven pom {pom} is missing; run from a cdcbridge checkout or set CDCBRIDGE_DEPLOY_DIR")
    marker = target / _MARKER
    digest = _pom_digest(pom)
    if marker.exists() and marker.read_text().strip() == digest:
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("Maven (`mvn`) is not installed; install it with `apt-get install maven` and retry")
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    log = log or target.parent / f"{component}-maven.log"
    command = [
        mvn, "-B", "-q", "-s", str(deploy_dir() / "maven-settings.xml"), "-f", str(pom), "package",
        f"-Djars.dir={target}", f"-Dregistry.dir={target}", f"-Dbuild.dir={target.parent / (component + '-build')}",
    ]  # fmt: skip
    with log.open("w") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise StackError(
            f"Maven could not fetch or build the {component} artifacts (exit {result.returncode}); see {log}"
        )
    marker.write_text(digest + "\n")
    return target


def ensure_all(components: tuple[str, ...] = COMPONENTS) -> dict[str, Path]:
    return {c: ensure_component(c) for c in components}
