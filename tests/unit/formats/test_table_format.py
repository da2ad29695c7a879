"""BridgeTableFormat: defaults, topic names, validation errors naming the field."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from cdcbridge.contract import MessageFormat
from cdcbridge.formats.errors import TopicNameError
from cdcbridge.formats.table_format import BridgeTableFormat

IMAGE, MUTATION = MessageFormat.RECORD_IMAGE, MessageFormat.MUTATE_LOG


def test_defaults() -> None:
    table_format = BridgeTableFormat()
    assert table_format.formats == (MUTATION,)
    assert table_format.tombstones is True
    assert table_format.topics(prefix="cdc", table="orders") == {MUTATION: "cdc.orders.mutation"}


def test_default_topic_names_per_format() -> None:
    table_format = BridgeTableFormat(formats=[IMAGE, MUTATION])
    assert table_format.topics(prefix="cdc", table="orders") == {
        IMAGE: "cdc.orders.image",
        MUTATION: "cdc.orders.mutation",
    }
    assert table_format.topic(IMAGE, prefix="", table="orders") == "orders.image"


def test_configured_topic_names_win() -> None:
    table_format = BridgeTableFormat(formats=["RECORD_IMAGE", "MUTATE_LOG"], image_topic="img", mutation_topic="mut")
    assert table_format.topics(prefix="cdc", table="orders") == {IMAGE: "img", MUTATION: "mut"}


def test_formats_from_yaml_are_case_insensitive_and_kept_in_canonical_order() -> None:
    assert BridgeTableFormat.model_validate({"formats": ["mutate_log", "record_image"]}).formats == (IMAGE, MUTATION)
    assert BridgeTableFormat.model_validate({"formats": "record_image"}).formats == (IMAGE,)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"formats": []}, "formats", "at least 1"),
        ({"formats": ["RECORD_IMAGE", "record_image"]}, "formats", "twice"),
        ({"formats": ["JSON"]}, "formats", "RECORD_IMAGE"),
        ({"image_topic": "bad topic"}, "image_topic", "pattern"),
        ({"mutation_topic": "x" * 250}, "mutation_topic", "pattern"),
        ({"mutation_topic": ".."}, "mutation_topic", "'..'"),
        ({"topic": "x"}, "topic", "Extra inputs"),
        ({"formats": ["RECORD_IMAGE", "MUTATE_LOG"], "image_topic": "t", "mutation_topic": "t"}, "", "separate"),
    ],
)
def test_invalid_settings_name_the_field(data: dict, field: str, message: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        BridgeTableFormat.model_validate(data)
    error = excinfo.value.errors()[0]
    assert ".".join(str(part) for part in error["loc"]).startswith(field)
    assert message in str(excinfo.value)


def test_a_prefix_that_makes_an_invalid_topic_is_reported() -> None:
    with pytest.raises(TopicNameError, match=re.escape("'my prefix.orders.mutation'")):
        BridgeTableFormat().topic(MUTATION, prefix="my prefix", table="orders")


def test_the_format_is_immutable() -> None:
    with pytest.raises(ValidationError):
        BridgeTableFormat().tombstones = False  # type: ignore[misc]
