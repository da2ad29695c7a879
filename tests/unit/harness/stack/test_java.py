from pathlib import Path

import pytest

from cdcbridge.harness.stack import java as java_module
from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.java import find_java, installed_javas


def _fake_jdk(root: Path, name: str, version: str) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\n')
    return home


@pytest.fixture
def jvm_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(java_module, "_JVM_ROOTS", (tmp_path,))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(java_module.shutil, "which", lambda name: None)
    return tmp_path


def test_finds_the_lowest_jdk_meeting_the_minimum(jvm_root: Path) -> None:
    _fake_jdk(jvm_root, "jdk17", "17.0.15")
    _fake_jdk(jvm_root, "temurin-25", "25")
    _fake_jdk(jvm_root, "jdk21", "21.0.2")
    assert find_java(17).major == 17
    assert find_java(21).major == 21
    assert find_java(22).home.name == "temurin-25"
    assert find_java(17, 21).major == 17


def test_ignores_folders_that_are_not_jdks(jvm_root: Path) -> None:
    (jvm_root / "not-a-jdk").mkdir()
    _fake_jdk(jvm_root, "jdk17", "17.0.1")
    assert [j.major for j in installed_javas()] == [17]


def test_missing_version_names_what_is_installed_and_the_fix(jvm_root: Path) -> None:
    _fake_jdk(jvm_root, "jdk17", "17.0.1")
    with pytest.raises(StackError) as error:
        find_java(21, purpose="Apicurio Registry 3.3")
    message = str(error.value)
    assert "Apicurio Registry 3.3 needs Java 21+" in message
    assert "17 at" in message
    assert "JAVA_HOME" in message
