"""The column cache: built once per key and Spark application, the oldest dropped past its size."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from cdcbridge.apply.spark.columns import ColumnCache


def _spark(application_id: str) -> Any:
    return SimpleNamespace(sparkContext=SimpleNamespace(applicationId=application_id))


def test_a_key_is_built_once_per_application() -> None:
    cache: ColumnCache[list[str]] = ColumnCache()
    builds: list[str] = []

    def build(name: str) -> list[str]:
        builds.append(name)
        return [name]

    first = cache.get(_spark("app-1"), "k", lambda: build("a"))
    assert cache.get(_spark("app-1"), "k", lambda: build("b")) is first
    assert cache.get(_spark("app-2"), "k", lambda: build("c")) == ["c"]
    assert builds == ["a", "c"]


def test_past_its_size_the_oldest_key_is_built_again() -> None:
    cache: ColumnCache[str] = ColumnCache(kept=2)
    spark = _spark("app")
    builds: list[str] = []

    def build(key: str) -> str:
        builds.append(key)
        return key

    for key in ("a", "b", "c", "b", "a"):
        cache.get(spark, key, lambda key=key: build(key))
    assert builds == ["a", "b", "c", "a"]
