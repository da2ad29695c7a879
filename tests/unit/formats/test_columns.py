"""Column selection and masking: the transformation of a change's cells and of a read-back row, and its settings."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from pydantic import ValidationError

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.formats.columns import ColumnPolicy, ColumnPolicyError, ColumnSettings, MaskMethod, hash_value
from cdcbridge.formats.mutate_log import build_mutate_log
from cdcbridge.formats.record_image import build_record_image

KEY = b"0123456789abcdef-test-key"
PK = [("id", 7)]


def change(action: RecordAction, cells: list[Cell]) -> ChangeRecord:
    return ChangeRecord("users", action, PK, cells, Sequence(1, 1_000_000, 0), "shard-0")


def policy(**settings: object) -> ColumnPolicy:
    return ColumnPolicy("users", ColumnSettings.model_validate(settings), KEY)


def put_row(**values: object) -> ChangeRecord:
    return change(RecordAction.PUT, [Cell(name, CellOp.PUT, value, 100) for name, value in values.items()])


def test_exclude_drops_the_columns_and_leaves_the_record_it_was_given_unchanged() -> None:
    original = put_row(name="Ann", email="ann@example.com", age=40)
    masked = policy(exclude=["email"]).apply(original)
    assert [c.name for c in masked.cells] == ["name", "age"]
    assert [c.name for c in original.cells] == ["name", "email", "age"]
    assert (masked.primary_key, masked.sequence, masked.action) == (PK, original.sequence, RecordAction.PUT)


def test_include_keeps_only_the_listed_columns() -> None:
    masked = policy(include=["name"]).apply(put_row(name="Ann", email="ann@example.com", age=40))
    assert [(c.name, c.value) for c in masked.cells] == [("name", "Ann")]


def test_hash_is_a_keyed_hmac_sha256_hex_string_equal_across_columns_and_tables() -> None:
    masked = policy(mask={"email": "hash", "backup_email": "hash"}).apply(
        put_row(email="ann@example.com", backup_email="ann@example.com")
    )
    expected = hmac.new(KEY, b"ann@example.com", hashlib.sha256).hexdigest()
    assert [c.value for c in masked.cells] == [expected, expected]  # joins still work
    assert masked.cells[0].op is CellOp.PUT and masked.cells[0].timestamp_ms == 100
    other_table = ColumnPolicy("orders", ColumnSettings(mask={"buyer": MaskMethod.HASH}), KEY)
    assert other_table.apply(put_row(buyer="ann@example.com")).cells[0].value == expected
    assert hash_value(b"another key----------", "ann@example.com") != expected  # without the key, no join


@pytest.mark.parametrize(
    ("value", "text"),
    [(42, b"42"), (-1, b"-1"), (1.5, b"1.5"), (True, b"true"), (False, b"false"), (b"\x00\xff", b"\x00\xff"),
     ("é", "é".encode())],
)  # fmt: skip
def test_every_value_type_hashes_to_a_string_from_its_text_form(value: object, text: bytes) -> None:
    masked = policy(mask={"c": "hash"}).apply(put_row(c=value)).cells[0].value
    assert masked == hmac.new(KEY, text, hashlib.sha256).hexdigest()
    assert isinstance(masked, str) and len(masked) == 64


def test_redact_leaves_a_put_row_without_the_column_and_clears_it_in_an_update() -> None:
    redact = policy(mask={"ssn": "redact"})
    assert [c.name for c in redact.apply(put_row(name="Ann", ssn="123-45-6789")).cells] == ["name"]
    cells = [Cell("ssn", CellOp.PUT, "123-45-6789", 200), Cell("name", CellOp.PUT, "B", 200)]
    update = change(RecordAction.UPDATE, cells)
    cells = redact.apply(update).cells
    assert [(c.name, c.op, c.value, c.timestamp_ms) for c in cells] == [
        ("ssn", CellOp.DELETE_ALL_VERSION, None, None),
        ("name", CellOp.PUT, "B", 200),
    ]
    assert redact.redacted_header == b"ssn"


def test_increments_of_masked_columns_are_redacted_and_deletes_pass_as_they_are() -> None:
    update = change(
        RecordAction.UPDATE,
        [Cell("score", CellOp.INCREMENT, 5), Cell("email", CellOp.DELETE_ONE_VERSION, None, 100),
         Cell("email", CellOp.DELETE_ALL_VERSION)],
    )  # fmt: skip
    cells = policy(mask={"score": "hash", "email": "hash"}).apply(update).cells
    assert [(c.op, c.value) for c in cells] == [
        (CellOp.DELETE_ALL_VERSION, None),
        (CellOp.DELETE_ONE_VERSION, None),
        (CellOp.DELETE_ALL_VERSION, None),
    ]


def test_a_read_back_row_is_selected_and_masked_like_the_cells() -> None:
    row = {"name": ("Ann", 1), "email": ("ann@example.com", 2), "ssn": ("123", 3), "notes": ("x", 4)}
    masked = policy(exclude=["notes"], mask={"email": "hash", "ssn": "redact"}).apply_row(row)
    assert masked == {"name": ("Ann", 1), "email": (hash_value(KEY, "ann@example.com"), 2)}
    assert policy(exclude=["notes"]).apply_row(None) is None


def test_masked_records_build_valid_messages_in_both_formats_without_the_plain_values() -> None:
    masking = policy(exclude=["notes"], mask={"email": "hash", "ssn": "redact"})
    secrets = ("ann@example.com", "123-45-6789", "private")
    records = [
        put_row(email=secrets[0], ssn=secrets[1], notes=secrets[2], name="Ann"),
        change(RecordAction.UPDATE, [Cell("ssn", CellOp.PUT, secrets[1], 5), Cell("notes", CellOp.PUT, secrets[2], 5)]),
    ]
    for record in map(masking.apply, records):
        built = [*build_mutate_log(record, instance="i"), *build_record_image(record, instance="i")]
        text = repr([item.value for item in built])
        assert not any(secret in text for secret in secrets)
    image = build_record_image(masking.apply(records[0]), instance="i")[0].value
    assert image["columns"]["email"]["value"] == ("string", hash_value(KEY, secrets[0]))
    assert set(image["columns"]) == {"email", "name"}


def test_a_primary_key_column_cannot_be_excluded_or_masked() -> None:
    policy(exclude=["email"]).check_primary_key(["id"])  # no error
    with pytest.raises(ColumnPolicyError, match=r"table users: column id is part of the primary key and cannot be "
                       r"excluded; remove it from source\.tables\[users\]\.columns"):  # fmt: skip
        policy(exclude=["id"]).check_primary_key(["id"])
    with pytest.raises(ColumnPolicyError, match="column region is part of the primary key and cannot be masked"):
        policy(mask={"region": "hash"}).check_primary_key(["region", "id"])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"include": ["a"], "exclude": ["b"]}, "include and exclude are both set; keep one"),
        ({"exclude": ["a"], "mask": {"a": "hash"}}, "column(s) a are both excluded and masked"),
        ({"include": ["a"], "mask": {"b": "redact"}}, "column(s) b are masked but not in include"),
        ({"exclude": ["a", "a"]}, "exclude lists a twice"),
        ({"mask": {"a": "scramble"}}, "'hash' or 'redact'"),
    ],
)
def test_conflicting_settings_are_refused_with_the_fix(settings: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ColumnSettings.model_validate(settings)


def test_hashing_needs_a_key_and_the_policy_never_shows_it() -> None:
    with pytest.raises(ColumnPolicyError, match=r"source\.column_hash_key is not set"):
        ColumnPolicy("users", ColumnSettings(mask={"email": MaskMethod.HASH}), None)
    assert KEY.decode() not in repr(policy(mask={"email": "hash"}))
    ColumnPolicy("users", ColumnSettings(mask={"ssn": MaskMethod.REDACT}), None)  # redaction needs no key


@pytest.mark.parametrize("key", [b"k" * 16, b"a-key-longer-than-the-sha256-block-of-64-bytes-" * 3, b"\x00\xff" * 20])
def test_the_policy_s_hashes_are_the_standard_hmac_sha256_for_any_key_length(key: bytes) -> None:
    masking = ColumnPolicy("users", ColumnSettings(mask={"c": MaskMethod.HASH}), key)
    for value in ("ann@example.com", "", 0, 2.5, True, b"\x01"):
        assert masking.apply(put_row(c=value)).cells[0].value == hash_value(key, value)
