"""Redaction: registered values and secret-shaped text never survive, ordinary text does."""

from __future__ import annotations

import base64
import json
import time
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from cdcbridge.observability.redaction import MASK, SecretRedactor, is_secret_setting


@pytest.fixture
def redactor() -> SecretRedactor:
    return SecretRedactor()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("connect password=hunter2 now", "connect password=*** now"),
        ("secret=abc123&next=1", "secret=***&next=1"),
        ("sasl.password=pa55word", "sasl.password=***"),
        ("ssl.key.password = 'pa ss'", "ssl.key.password = '***'"),
        (
            "{'sasl.password': 'pa55', 'bootstrap.servers': 'k:9092'}",
            "{'sasl.password': '***', 'bootstrap.servers': 'k:9092'}",
        ),
        ('{"access_key_secret": "abc\\"def", "x": 1}', '{"access_key_secret": "***", "x": 1}'),
        (
            "{'x-ots-signature': 'Zm9v', 'x-ots-ststoken': 'tok', 'x-ots-date': 'now'}",
            "{'x-ots-signature': '***', 'x-ots-ststoken': '***', 'x-ots-date': 'now'}",
        ),
        ("basic.auth.user.info=alice:pw", "basic.auth.user.info=***"),
        ("AccessKeySecret=LTAIxyz", "AccessKeySecret=***"),
        ("registry http://alice:s3cret@registry:8080/apis", "registry http://***@registry:8080/apis"),
        ("dsn postgresql://app:pw@db:5432/cdc?sslmode=require", "dsn postgresql://***@db:5432/cdc?sslmode=require"),
        ("host=db user=app password='p w' dbname=cdc", "host=db user=app password='***' dbname=cdc"),
        ("Authorization: OTS LTAI5tAbc:Zm9vYmFy+/=", "Authorization: OTS ***"),
        ("{'Authorization': 'OTS LTAI5tAbc:Zm9v'}", "{'Authorization': 'OTS ***'}"),
        ("authorization=Basic YWxpY2U6cHc=", "authorization=Basic ***"),
        ("signed OTS LTAI5tAbc:c2lnbmF0dXJl= in header", f"signed OTS {MASK} in header"),
        ("spark.hadoop.fs.s3a.secret.key=wJalrXUtn/K7MDENG", "spark.hadoop.fs.s3a.secret.key=***"),
        ("--conf spark.hadoop.fs.s3a.access.key=AKIAIOSFODNN7", "--conf spark.hadoop.fs.s3a.access.key=***"),
        ("{'spark.hadoop.fs.s3a.session.token': 'IQoJb3Jp'}", "{'spark.hadoop.fs.s3a.session.token': '***'}"),
        ("fs.s3a.bucket.logs.secret.key = 'k y'", "fs.s3a.bucket.logs.secret.key = '***'"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtn", "AWS_SECRET_ACCESS_KEY=***"),
        ("  region: us-east-1\n  aws_secret_access_key: wJal/rX", "  region: us-east-1\n  aws_secret_access_key: ***"),
    ],
)
def test_secret_shapes_are_masked(redactor: SecretRedactor, text: str, expected: str) -> None:
    assert redactor.redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "read 120 records from shard 0b2c-1 of table orders, checkpoint 1700000000:42",
        "token_count=5 password_length=12",
        "http://registry:8080/apis/ccompat/v7 ok",
        "missing secret: set CDCBRIDGE_TS_SECRET or source.credentials.access_key_secret",
        "lease s1 taken by worker-a (epoch 3)",
    ],
)
def test_ordinary_text_is_left_alone(redactor: SecretRedactor, text: str) -> None:
    assert redactor.redact(text) == text


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("spark.hadoop.fs.s3a.secret.key", True),
        ("spark.hadoop.fs.s3a.access.key", True),
        ("spark.hadoop.fs.s3a.session.token", True),
        ("spark.hadoop.fs.s3a.bucket.logs.secret.key", True),
        ("sasl.password", True),
        ("spark.hadoop.fs.s3a.endpoint", False),
        ("spark.hadoop.fs.s3a.aws.credentials.provider", False),
        ("spark.executor.memory", False),
    ],
)
def test_setting_names_that_hold_secrets(name: str, secret: bool) -> None:
    assert is_secret_setting(name) is secret


def test_registered_secrets_are_masked_in_every_encoding(redactor: SecretRedactor) -> None:
    secret = 'k3y/with "quotes" \\ and é'
    assert redactor.register(secret)
    for form in (
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        quote(secret, safe=""),
        base64.b64encode(secret.encode()).decode(),
    ):
        masked = redactor.redact(f"before {form} after")
        assert masked == f"before {MASK} after", form


def test_secretstr_values_and_longest_first(redactor: SecretRedactor) -> None:
    redactor.register(SecretStr("abcd"))
    redactor.register("abcdefgh")
    assert redactor.redact("x abcdefgh y abcd z") == "x *** y *** z"


def test_none_blank_and_short_values_are_not_registered(redactor: SecretRedactor) -> None:
    assert not redactor.register(None)
    assert not redactor.register("   ")
    assert not redactor.register("abc")
    assert redactor.redact("abc is fine") == "abc is fine"


def test_connection_secrets_register_the_password_inside(redactor: SecretRedactor) -> None:
    assert redactor.register_connection("postgresql://app:Pg-Pass-1@db:5432/cdc")
    assert redactor.register_connection(SecretStr("host=db user=app password='Kw Pass 2' dbname=cdc"))
    assert redactor.register_connection("alice:Reg-Pass-3")
    assert redactor.register_connection("postgresql://db/cdc?user=app&password=Query-Pass-4")
    text = "Pg-Pass-1 / Kw Pass 2 / Reg-Pass-3 / Query-Pass-4"
    assert redactor.redact(text) == "*** / *** / *** / ***"


def test_redaction_is_idempotent(redactor: SecretRedactor) -> None:
    redactor.register("S3cr3t-Value")
    text = "password=x {'secret': 'y'} http://u:p@h S3cr3t-Value Authorization: OTS a:b"
    once = redactor.redact(text)
    assert redactor.redact(once) == once


def test_clear_forgets_registered_values(redactor: SecretRedactor) -> None:
    redactor.register("S3cr3t-Value")
    redactor.clear()
    assert redactor.redact("S3cr3t-Value") == "S3cr3t-Value"


def test_long_adversarial_lines_stay_fast(redactor: SecretRedactor) -> None:
    redactor.register("S3cr3t-Value")
    line = "a-" * 50_000 + "." * 50_000 + "x" * 100_000
    started = time.perf_counter()
    redactor.redact(line)
    assert time.perf_counter() - started < 2.0


_secret_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=6, max_size=30).filter(
    lambda s: s.strip() == s and len(set(s)) > 3
)


@settings(max_examples=150, deadline=None)
@given(secret=_secret_text, prefix=st.text(max_size=20), suffix=st.text(max_size=20))
def test_a_registered_secret_never_survives_in_any_context(secret: str, prefix: str, suffix: str) -> None:
    redactor = SecretRedactor()
    redactor.register(secret)
    for text in (f"{prefix}{secret}{suffix}", json.dumps({"m": prefix + secret + suffix}), repr((prefix, secret))):
        assert secret not in redactor.redact(text)
