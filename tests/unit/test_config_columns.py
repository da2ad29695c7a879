"""`source.tables[].columns` and `source.column_hash_key` in the YAML configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcbridge.config import ConfigError, load_config, parse_config
from cdcbridge.formats.columns import hash_value

SECRET_KEY = "s3cret-column-hash-key-0042"


def config_with(columns: dict, **source: object) -> dict:
    return {"source": {"tables": [{"name": "users", "columns": columns}, {"name": "plain"}], **source}}


def test_the_hash_key_comes_from_the_environment_and_gives_the_table_its_policy() -> None:
    config = parse_config(
        config_with({"exclude": ["notes"], "mask": {"email": "hash"}}, column_hash_key="${COLUMN_KEY}"),
        environ={"COLUMN_KEY": SECRET_KEY},
    )
    policy = config.source.column_policy("users")
    assert policy is not None and config.source.column_policy("plain") is None
    assert policy.apply_row({"email": ("a@b.c", 1), "notes": ("n", 1)}) == {
        "email": (hash_value(SECRET_KEY.encode(), "a@b.c"), 1)
    }
    assert SECRET_KEY not in repr(config) and SECRET_KEY not in str(config.model_dump())


def test_the_hash_key_can_come_from_a_secret_file(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(SECRET_KEY + "\n")
    config = parse_config(
        config_with({"mask": {"email": "hash"}}, column_hash_key=f"${{file:{tmp_path / 'key'}}}"), environ={}
    )
    assert config.source.column_hash_key is not None
    assert config.source.column_hash_key.get_secret_value() == SECRET_KEY


def test_hashing_without_a_key_names_the_table_and_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"table\(s\) users mask columns with hash but column_hash_key is not set"):
        parse_config(config_with({"mask": {"email": "hash"}}), environ={})
    parse_config(config_with({"mask": {"ssn": "redact"}}), environ={})  # redaction needs no key


def test_a_short_key_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError, match=r"source\.column_hash_key") as error:
        parse_config(config_with({"mask": {"email": "hash"}}, column_hash_key="short-key"), environ={})
    assert "short-key" not in str(error.value)


def test_column_conflicts_are_configuration_errors_naming_the_table_entry(tmp_path: Path) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text("source:\n  tables:\n    - name: users\n      columns: {include: [a], exclude: [b]}\n")
    with pytest.raises(ConfigError, match=r"source\.tables\.0\.columns: .*include and exclude are both set"):
        load_config(path, environ={})
    path.write_text("source:\n  tables:\n    - name: users\n      columns: {excludes: [b]}\n")
    with pytest.raises(ConfigError, match=r"source\.tables\.0\.columns\.excludes: unknown key; did you mean 'exclude'"):
        load_config(path, environ={})
