"""Decoded-envelope dicts (DESIGN §6 field names) for the apply tests, written by hand so the tests do not depend on
cdcbridge.formats. Sequence number n means epoch 1, timestamp n ms, row index 0."""

from __future__ import annotations

from typing import Any

from cdcbridge.changes import Sequence

TABLE = "orders"
PK = (("id", 7),)


def seq_block(n: int, op_index: int = 0) -> dict[str, Any]:
    sequence = Sequence(1, n * 1000, 0)
    return {
        "epoch": 1,
        "timestamp_us": n * 1000,
        "row_index": 0,
        "op_index": op_index,
        "seq_key": sequence.key(op_index),
    }


def seq_key(n: int, op_index: int = 0) -> str:
    return Sequence(1, n * 1000, 0).key(op_index)


def _common(n: int, op_index: int, pk: tuple, table: str, row_deleted: bool, offset: int | None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "source": {"instance": "inst", "table": table, "shard_id": "s0", "record_type": "UPDATE"},
        "seq": seq_block(n, op_index),
        "timestamp": n,
        "pk": [{"name": name, "value": value} for name, value in pk],
        "row_deleted": row_deleted,
    }
    if offset is not None:
        message.update({"_topic": f"cdc.{table}", "_partition": 0, "_offset": offset})
    return message


def put(name: str, value: Any, version: int | None = None) -> dict[str, Any]:
    return {"name": name, "op": "PUT", "value": value, "version": version, "amount": None}


def delete_one(name: str, version: int) -> dict[str, Any]:
    return {"name": name, "op": "DELETE_ONE_VERSION", "value": None, "version": version, "amount": None}


def delete_all(name: str) -> dict[str, Any]:
    return {"name": name, "op": "DELETE_ALL_VERSION", "value": None, "version": None, "amount": None}


def increment(name: str, amount: int | None = None, *, value: int | None = None, version: int | None = None) -> dict:
    return {"name": name, "op": "INCREMENT", "value": value, "version": version, "amount": amount}


def mutation(
    n: int,
    mutation_type: str,
    cells: list[dict[str, Any]] | None = None,
    *,
    op_index: int = 0,
    pk: tuple = PK,
    table: str = TABLE,
    offset: int | None = None,
) -> dict[str, Any]:
    """A MUTATE_LOG envelope; PUT implies replace_row, DELETE implies row_deleted."""
    message = _common(n, op_index, pk, table, mutation_type == "DELETE", offset)
    message.update({"type": mutation_type, "replace_row": mutation_type == "PUT", "cells": list(cells or [])})
    return message


def image(
    n: int,
    columns: dict[str, tuple[Any, int | None]] | None = None,
    *,
    partial: bool = False,
    row_deleted: bool = False,
    pk: tuple = PK,
    table: str = TABLE,
    offset: int | None = None,
) -> dict[str, Any]:
    """A RECORD_IMAGE envelope; `columns` maps name → (value, version)."""
    message = _common(n, 0, pk, table, row_deleted, offset)
    message.update(
        {
            "columns": {name: {"value": v, "version": ver} for name, (v, ver) in (columns or {}).items()},
            "partial": partial,
        }
    )
    return message
