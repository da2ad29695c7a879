"""A restarted broker binds and advertises exactly as the one it replaces (read back from its server.properties)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcbridge.harness.stack.kafka import _server_properties, kafka_listeners


@pytest.mark.parametrize(
    ("bind", "advertised", "expected_advertised"),
    [("127.0.0.1", None, "127.0.0.1"), ("0.0.0.0", None, "127.0.0.1"), ("0.0.0.0", "broker.lan", "broker.lan")],
)
def test_the_bind_and_advertised_hosts_are_read_back(
    tmp_path: Path, bind: str, advertised: str | None, expected_advertised: str
) -> None:
    (tmp_path / "kafka").mkdir()
    text = _server_properties(bind, 19092, 19093, tmp_path / "kafka" / "data", advertised)
    (tmp_path / "kafka" / "server.properties").write_text(text)
    assert kafka_listeners(tmp_path) == (bind, expected_advertised, 19092, 19093)
