from pathlib import Path

import pytest

from cdcbridge.harness.stack import artifacts
from cdcbridge.harness.stack.errors import StackError


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    deploy = tmp_path / "deploy"
    (deploy / "kafka").mkdir(parents=True)
    (deploy / "kafka" / "pom.xml").write_text("<project/>")
    (deploy / "maven-settings.xml").write_text("<settings/>")
    monkeypatch.setenv("CDCBRIDGE_DEPLOY_DIR", str(deploy))
    monkeypatch.setenv("CDCBRIDGE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _fake_mvn(dirs: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int = 0) -> list[list[str]]:
    calls: list[list[str]] = []

    class Result:
        returncode = exit_code

    def run(command: list[str], **kwargs: object) -> Result:
        calls.append(command)
        target = next(a.split("=", 1)[1] for a in command if a.startswith("-Djars.dir="))
        Path(target).mkdir(parents=True, exist_ok=True)
        (Path(target) / "kafka.jar").write_text("jar")
        return Result()

    monkeypatch.setattr(artifacts.shutil, "which", lambda name: "/usr/bin/mvn")
    monkeypatch.setattr(artifacts.subprocess, "run", run)
    return calls


def test_second_run_reuses_the_cache_and_a_changed_pom_refetches(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_mvn(dirs, monkeypatch)
    first = artifacts.ensure_component("kafka")
    assert (first / "kafka.jar").exists()
    artifacts.ensure_component("kafka")
    assert len(calls) == 1
    (dirs / "deploy" / "kafka" / "pom.xml").write_text("<project><!-- new version --></project>")
    artifacts.ensure_component("kafka")
    assert len(calls) == 2
    assert "-s" in calls[0] and calls[0][calls[0].index("-f") + 1].endswith("deploy/kafka/pom.xml")


def test_a_changed_source_file_rebuilds_and_builds_outside_the_checkout(
    dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_mvn(dirs, monkeypatch)
    source = dirs / "deploy" / "kafka" / "src" / "main" / "java" / "Kernel.java"
    source.parent.mkdir(parents=True)
    source.write_text("class Kernel {}")
    artifacts.ensure_component("kafka")
    artifacts.ensure_component("kafka")
    assert len(calls) == 1
    source.write_text("class Kernel { int changed; }")
    artifacts.ensure_component("kafka")
    assert len(calls) == 2
    build_dir = next(a.split("=", 1)[1] for a in calls[0] if a.startswith("-Dbuild.dir="))
    assert Path(build_dir) == dirs / "cache" / "jvm" / "kafka-build"


def test_missing_maven_says_how_to_install_it(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts.shutil, "which", lambda name: None)
    with pytest.raises(StackError, match=r"Maven \(`mvn`\) is not installed; install it with `apt-get install maven`"):
        artifacts.ensure_component("kafka")


def test_a_failed_fetch_names_the_log_and_leaves_no_marker(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_mvn(dirs, monkeypatch, exit_code=1)
    with pytest.raises(
        StackError, match=r"Maven could not fetch or build the kafka artifacts \(exit 1\); see .*kafka-maven.log"
    ):
        artifacts.ensure_component("kafka")
    assert not (dirs / "cache" / "jvm" / "kafka" / ".complete").exists()


def test_unknown_component_is_refused(dirs: Path) -> None:
    with pytest.raises(StackError, match="unknown JVM component 'zookeeper'"):
        artifacts.ensure_component("zookeeper")


def test_optional_components_are_known_but_not_fetched_with_the_others() -> None:
    assert "s3a" in artifacts.OPTIONAL_COMPONENTS and "s3a" not in artifacts.COMPONENTS
    assert (Path(artifacts.__file__).parents[3] / "deploy" / "s3a" / "pom.xml").exists()


def test_a_multi_module_build_rebuilds_when_a_module_source_changes(
    dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conformance suite is a parent pom with modules (sdk5, sdk4) sharing common/ (sources, no pom)."""
    calls = _fake_mvn(dirs, monkeypatch)
    suite = dirs / "tests" / "java"
    module_source = suite / "sdk5" / "src" / "main" / "java" / "Check.java"
    module_source.parent.mkdir(parents=True)
    (suite / "pom.xml").write_text("<project><modules/></project>")
    (suite / "sdk5" / "pom.xml").write_text("<project/>")
    module_source.write_text("class Check {}")
    shared_source = suite / "common" / "src" / "main" / "java" / "Shared.java"
    shared_source.parent.mkdir(parents=True)
    shared_source.write_text("class Shared {}")
    monkeypatch.setitem(artifacts.TEST_COMPONENTS, "conformance", suite / "pom.xml")
    artifacts.ensure_component("conformance")
    artifacts.ensure_component("conformance")
    assert len(calls) == 1
    module_source.write_text("class Check { int changed; }")
    artifacts.ensure_component("conformance")
    (suite / "sdk5" / "pom.xml").write_text("<project><!-- new dependency --></project>")
    artifacts.ensure_component("conformance")
    shared_source.write_text("class Shared { int changed; }")
    artifacts.ensure_component("conformance")
    assert len(calls) == 4
    assert calls[0][calls[0].index("-f") + 1] == str(suite / "pom.xml")


def test_the_conformance_suite_is_a_test_component_of_the_checkout() -> None:
    assert artifacts.available_test_components() == ("conformance",)
    assert "conformance" not in artifacts.COMPONENTS
