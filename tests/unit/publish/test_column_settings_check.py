"""A worker or snapshot refuses to start when `columns` names a primary-key column (only Tablestore knows the key)."""

from __future__ import annotations

import pytest

from cdcbridge.config import parse_config
from cdcbridge.publish.errors import BridgeStartError
from cdcbridge.publish.tables import check_column_settings
from tests.unit.coordination.fake_ots import FakeOTSClient


def source(pk: list[tuple[str, str]]) -> FakeOTSClient:
    client = FakeOTSClient()
    client.tables["users"] = {}
    client.schemas["users"] = pk
    return client


def config(columns: dict) -> object:
    tables = [{"name": "users", "columns": columns}]
    return parse_config({"source": {"tables": tables, "column_hash_key": "k" * 16}}, environ={})


def test_masking_a_primary_key_column_is_refused_naming_the_table_column_and_fix() -> None:
    client = source([("region", "STRING"), ("id", "INTEGER")])
    with pytest.raises(BridgeStartError, match=r"table users: column region is part of the primary key and cannot "
                       r"be masked; remove it from source\.tables\[users\]\.columns"):  # fmt: skip
        check_column_settings(config({"mask": {"region": "hash"}}), client, "users")
    with pytest.raises(BridgeStartError, match="column id is part of the primary key and cannot be excluded"):
        check_column_settings(config({"exclude": ["id"]}), client, "users")


def test_settings_of_attribute_columns_pass_and_a_table_without_settings_is_not_described() -> None:
    client = source([("id", "INTEGER")])
    check_column_settings(config({"include": ["id", "name"], "mask": {"name": "redact"}}), client, "users")
    calls = len(client.calls)
    check_column_settings(parse_config({"source": {"tables": [{"name": "users"}]}}, environ={}), client, "users")
    assert len(client.calls) == calls
