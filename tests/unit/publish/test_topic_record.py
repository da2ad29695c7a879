"""A recorded partition count edited by hand into something that is not a count is refused, naming the row."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cdcbridge.publish.topic_record import TopicPartitionRecord, TopicRecordError


class _OneRowClient:
    """Answers every get_row with one `Partitions` value, as the status table would."""

    def __init__(self, value: object) -> None:
        self.value = value

    def get_row(self, table: str, primary_key: object, columns: object, max_version: int) -> tuple:
        return None, SimpleNamespace(attribute_columns=[("Partitions", self.value, 1)]), None


def test_a_recorded_count_is_read_back() -> None:
    record = TopicPartitionRecord(_OneRowClient(6), "status", "stream-1")  # type: ignore[arg-type]
    assert record.read(["cdc.orders.mutation"]) == {"cdc.orders.mutation": 6}


@pytest.mark.parametrize("value", ["6", 0, -3, True, 6.0])
def test_a_count_edited_into_a_non_count_names_the_row_and_the_fix(value: object) -> None:
    record = TopicPartitionRecord(_OneRowClient(value), "status", "stream-1")  # type: ignore[arg-type]
    with pytest.raises(TopicRecordError) as raised:
        record.read(["cdc.orders.mutation"])
    message = str(raised.value)
    assert "StatusValue='cdc.orders.mutation'" in message and "StreamId='stream-1'" in message
    assert "set it to the topic's partition count or delete the row" in message
