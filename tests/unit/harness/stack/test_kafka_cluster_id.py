"""A new KRaft cluster id never starts with "-" (the format command would read it as an option)."""

from __future__ import annotations

import uuid

import pytest

from cdcbridge.harness.stack import kafka


def test_an_id_that_would_start_with_a_dash_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    dash_first = uuid.UUID(bytes=bytes([0xF8]) + bytes(15))  # URL-safe base64 "-AAA…"
    plain = uuid.UUID(bytes=bytes(16))
    draws = iter([dash_first, plain])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(draws))
    assert kafka.new_cluster_id() == "A" * 22


def test_the_id_is_kept_beside_the_data_folder(tmp_path) -> None:
    first = kafka._cluster_id(tmp_path)
    assert len(first) == 22 and not first.startswith("-")
    assert kafka._cluster_id(tmp_path) == first
