"""The C page encoder lays a page out exactly as the record-by-record path would, and stops where it must.

encode_into(records, start, stop, plan, rows, shard_id, start_us, lists) must append, for each record it handles,
what keys.record_key and the single-record C encoders give (formats in plan order), and stop at the first record
that is not the plain case in its key or any format, or that was committed before start_us.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp, MessageFormat
from cdcbridge.formats import fast_envelopes
from cdcbridge.formats.errors import KeyEncodeError
from cdcbridge.formats.fast_envelopes import FastFormat, PageLists, encode_into, page_plan, record_key
from cdcbridge.formats.keys import record_key as reference_key

from .test_fast_envelopes import c_module, generated_image_cases, generated_records

ML, RI = MessageFormat.MUTATE_LOG, MessageFormat.RECORD_IMAGE
SCHEMA_IDS = {ML: 7, RI: 8}
TOPICS = {ML: "cdc.t.mutation", RI: "cdc.t.image"}


@pytest.fixture(autouse=True, scope="module")
def _c_on() -> None:
    c_module()  # the C module, configured as shipped, whatever the environment of the run says


def plan_for(formats: tuple[MessageFormat, ...], instance: str = "inst", tombstones: bool = True) -> Any:
    plan = page_plan([(FastFormat(f, instance, SCHEMA_IDS[f], tombstones), TOPICS[f]) for f in formats])
    assert plan is not None
    return plan


def new_lists() -> PageLists:
    return PageLists.empty()


def one_by_one(
    records: list[ChangeRecord],
    formats: tuple[MessageFormat, ...],
    instance: str,
    rows: dict | None,
    tombstones: bool,
    shard_id: str,
) -> tuple[int, PageLists]:
    """The reference: the single-record encoders and keys.record_key, up to the first record one of them declines
    (an empty shard id filled in first, as the processor does)."""
    lists = new_lists()
    for index, record in enumerate(records):
        if not record.shard_id and type(record.shard_id) is str:
            record.shard_id = shard_id
        key = record_key(record)
        row = (rows or {}).get(id(record))
        values = [FastFormat(f, instance, SCHEMA_IDS[f], tombstones)(record, row) for f in formats]
        if key is None or any(v is None for v in values):
            return index, lists
        lists[0].append(record.sequence)
        lists[1].append(0)
        for f, messages in zip(formats, values, strict=True):
            for value in messages:
                lists[3].append(TOPICS[f])
                lists[4].append(key)
                lists[5].append(value)
        lists[2].append(len(lists[3]))
    return len(records), lists


# --- keys ------------------------------------------------------------------------------------------------

PK_VALUES = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=2**63, max_value=2**70),
    st.text(max_size=12),
    st.sampled_from(['a"b', "a\\b", "tab\there", "nul\x00", "\ud800", "ünï", "日本"]),
    st.binary(max_size=6),
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(PK_VALUES, min_size=0, max_size=4))
def test_the_c_key_is_the_canonical_key_or_declines(values: list[Any]) -> None:
    record = ChangeRecord("t", RecordAction.PUT, [(f"k{i}", v) for i, v in enumerate(values)], [], Sequence(1, 1, 0))
    fast = record_key(record)
    try:
        expected = reference_key(record)
    except KeyEncodeError:
        assert fast is None  # what the reference refuses, the C path never writes
        return
    plain = values and all(
        (type(v) is int and -(2**63) <= v < 2**63)
        or (type(v) is str and not any(c in v for c in '"\\') and all(ord(c) >= 0x20 for c in v))
        for v in values
    )
    assert fast == (expected if plain else None)


# --- pages -----------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.lists(generated_records(), min_size=1, max_size=8), st.sampled_from([(ML,), (RI, ML), (ML, RI)]))
def test_a_page_is_laid_out_as_record_by_record_and_stops_at_the_first_declined_record(
    generated: list[tuple], formats: tuple[MessageFormat, ...]
) -> None:
    records = [record for record, _, _ in generated]
    instance = generated[0][1]
    if not isinstance(instance, str) or "\ud800" <= max(instance, default="a") <= "\udfff":
        instance = "inst"
    expected_stop, expected = one_by_one(records, formats, instance, None, True, "shard-x")
    lists = new_lists()
    stop = encode_into(records, 0, len(records), plan_for(formats, instance), None, "shard-x", -1, lists)
    assert stop == expected_stop
    assert lists == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(generated_image_cases(), min_size=1, max_size=6))
def test_rows_read_back_reach_the_image_encoder_by_record_identity(cases: list[tuple]) -> None:
    records = [case[0] for case in cases]
    rows = {id(case[0]): case[2] for case in cases if case[2] is not None}
    tombstones = cases[0][3]
    expected_stop, expected = one_by_one(records, (RI, ML), "inst", rows, tombstones, "s")
    lists = new_lists()
    stop = encode_into(records, 0, len(records), plan_for((RI, ML), "inst", tombstones), rows, "s", -1, lists)
    assert (stop, lists) == (expected_stop, expected)


def put(i: int, pk: Any = None, shard_id: str = "shard-1", timestamp_us: int | None = None) -> ChangeRecord:
    return ChangeRecord(
        "t", RecordAction.PUT, [("id", i if pk is None else pk)], [Cell("v", CellOp.PUT, i, 1)],
        Sequence(1, timestamp_us or 1_000 + i, 0), shard_id,
    )  # fmt: skip


def test_it_stops_at_stop_at_an_odd_key_and_before_the_snapshot_start() -> None:
    plan = plan_for((ML,))
    records = [put(0), put(1), put(2, pk=b"\x00"), put(3), put(4, timestamp_us=10), put(5, timestamp_us=20)]
    lists = new_lists()
    assert encode_into(records, 0, 1, plan, None, "s", -1, lists) == 1  # stop
    assert encode_into(records, 1, 6, plan, None, "s", -1, lists) == 2  # a bytes key: the Python path words it
    assert encode_into(records, 3, 6, plan, None, "s", 15, lists) == 4  # committed before the snapshot start
    assert encode_into(records, 5, 6, plan, None, "s", 15, lists) == 6
    assert lists[0] == [records[i].sequence for i in (0, 1, 3, 5)]
    assert lists[1] == [0, 0, 0, 0] and lists[2] == [1, 2, 3, 4]
    assert lists[4] == [b"[0]", b"[1]", b"[3]", b"[5]"]


def test_an_empty_shard_id_is_filled_in_before_encoding() -> None:
    record = put(1, shard_id="")
    lists = new_lists()
    assert encode_into([record], 0, 1, plan_for((ML,)), None, "shard-9", -1, lists) == 1
    assert record.shard_id == "shard-9"
    assert lists[5] == FastFormat(ML, "inst", SCHEMA_IDS[ML])(record, None)


def test_a_delete_image_and_its_tombstone_share_the_key() -> None:
    record = ChangeRecord("t", RecordAction.DELETE, [("id", 4)], [], Sequence(1, 5, 0), "s")
    lists = new_lists()
    encode_into([record], 0, 1, plan_for((RI, ML)), None, "s", -1, lists)
    assert lists[3] == [TOPICS[RI], TOPICS[RI], TOPICS[ML]]
    assert lists[4] == [b"[4]"] * 3 and lists[5][1] is None and lists[2] == [3]


def test_no_plan_without_a_c_encoder_for_every_format(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_envelopes, "_encode_record_image", None)
    assert page_plan([(FastFormat(RI, "i", 1), "t"), (FastFormat(ML, "i", 1), "u")]) is None
    assert page_plan([(FastFormat(ML, "i", 1), "u")]) is not None
    assert page_plan([]) is None


def test_bad_arguments_raise_type_errors_naming_the_call() -> None:
    with pytest.raises(TypeError, match="encode_into"):
        encode_into((put(1),), 0, 1, plan_for((ML,)), None, "s", -1, new_lists())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="plan"):
        encode_into([put(1)], 0, 1, ((5, "i", 1, True, "t"),), None, "s", -1, new_lists())


def test_page_encoding_keeps_reference_counts_unchanged() -> None:
    """Every path through the C page code releases what it took (a leak per message would grow without bound)."""
    records = [put(0), put(1, pk="ä-key"), put(2, pk=b"x"), put(3, timestamp_us=5)]
    delete = ChangeRecord("t", RecordAction.DELETE, [("id", 9)], [], Sequence(1, 5_000, 0), "s")
    plan = plan_for((RI, ML))
    watched = [*records, delete, plan, *[r.sequence for r in records], records[1].primary_key[0][1]]

    def run() -> None:
        lists = new_lists()
        encode_into(records, 0, 4, plan, None, "s", -1, lists)  # stops at the bytes key
        encode_into(records, 3, 4, plan, None, "s", 100, lists)  # stops at the snapshot start
        encode_into([delete], 0, 1, plan, {id(delete): {"v": (1, 2)}}, "s", -1, lists)

    run()
    before = [sys.getrefcount(obj) for obj in watched]
    for _ in range(200):
        run()
    assert [sys.getrefcount(obj) for obj in watched] == before
