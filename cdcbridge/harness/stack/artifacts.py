"""Fetch the JVM pieces from Maven Central through the poms in deploy/ (never a hard-coded download URL).

Each component's files land in `<cache>/jvm/<component>/`; a marker holding a hash of the pom (and of the sources
a component builds, such as the Spark kernel under deploy/spark/src, or a multi-module build's module poms and
sources) makes a second run re-use them and a changed pom or source build again. Maven's own local repository
(~/.m2) caches the downloads themselves. Test components (the Java conformance suite under tests/java) exist only
in a checkout.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.paths import REPO_ROOT, cache_dir, deploy_dir

#: What the local stack and the apply job always need (`cdcbridge stack fetch`, `make setup`).
COMPONENTS = ("kafka", "apicurio", "spark")
#: Fetched only when a configuration needs them: s3a = hadoop-aws and the AWS SDK bundle (~560 MB), for s3a:// paths.
OPTIONAL_COMPONENTS = ("s3a",)
#: Built from a checkout's tests/: conformance = the emulator judged by Alibaba's Java SDK and stream client.
TEST_COMPONENTS = {"conformance": REPO_ROOT / "tests" / "java" / "pom.xml"}
_MARKER = ".complete"


def component_dir(component: str) -> Path:
    return cache_dir() / "jvm" / component


def _pom_digest(pom: Path) -> str:
    """The pom, its `src/`, and beside it each folder's pom and `src/` (a multi-module build's modules and the
    sources they share, such as the conformance suite's common/)."""
    settings = deploy_dir() / "maven-settings.xml"
    digest = hashlib.sha256(pom.read_bytes())
    sources = pom.parent / "src"
    for source in sorted(p for p in sources.rglob("*") if p.is_file()):
        digest.update(str(source.relative_to(sources)).encode() + b"\0" + source.read_bytes())
    for module in sorted(p for p in pom.parent.iterdir() if (p / "pom.xml").is_file() or (p / "src").is_dir()):
        for source in sorted(p for p in [module / "pom.xml", *(module / "src").rglob("*")] if p.is_file()):
            digest.update(str(source.relative_to(pom.parent)).encode() + b"\0" + source.read_bytes())
    if settings.exists():
        digest.update(settings.read_bytes())
    return digest.hexdigest()


def _pom_of(component: str) -> Path:
    if component in TEST_COMPONENTS:
        return TEST_COMPONENTS[component]
    return deploy_dir() / component / "pom.xml"


def available_test_components() -> tuple[str, ...]:
    """The test components this installation can build (their poms exist only in a checkout)."""
    return tuple(name for name, pom in TEST_COMPONENTS.items() if pom.exists())


def ensure_component(component: str, *, log: Path | None = None) -> Path:
    """Return the folder holding `component`'s jars, running Maven first if they are missing or stale."""
    known = (*COMPONENTS, *OPTIONAL_COMPONENTS, *TEST_COMPONENTS)
    if component not in known:
        raise StackError(f"unknown JVM component {component!r}; known: {', '.join(known)}")
    target = component_dir(component)
    pom = _pom_of(component)
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
