"""The partition count of each topic the bridge created, kept in the status table beside the leases.

Rows: StreamId = the table's stream id, StatusType = "TopicPartitions", StatusValue = topic name, attribute
`Partitions`. Written once with EXPECT_NOT_EXIST (the first worker to create a topic records it; peers racing it
record the same number), read at every start to detect a topic whose partition count was changed behind our back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tablestore import Condition, OTSClient, OTSServiceError, Row, RowExistenceExpectation

STATUS_TYPE = "TopicPartitions"
PARTITIONS_COLUMN = "Partitions"


class TopicRecordError(Exception):
    """A recorded partition count was edited into something that is not a count; the message names the row."""


class TopicPartitionRecord:
    def __init__(self, client: OTSClient, status_table: str, stream_id: str) -> None:
        self._client = client
        self._table = status_table
        self._stream_id = stream_id

    def _pk(self, topic: str) -> list[tuple[str, str]]:
        return [("StreamId", self._stream_id), ("StatusType", STATUS_TYPE), ("StatusValue", topic)]

    def read(self, topics: Iterable[str]) -> dict[str, int]:
        recorded = {}
        for topic in topics:
            _, row, _ = self._client.get_row(self._table, self._pk(topic), [PARTITIONS_COLUMN], max_version=1)
            if row is not None and row.attribute_columns:
                recorded[topic] = self._count(topic, row.attribute_columns[0][1])
        return recorded

    def _count(self, topic: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TopicRecordError(
                f"status table {self._table}: row (StreamId={self._stream_id!r}, StatusType={STATUS_TYPE!r}, "
                f"StatusValue={topic!r}) has {PARTITIONS_COLUMN} {value!r}, not a positive INTEGER; set it to the "
                "topic's partition count or delete the row (the bridge then records the current count again)"
            )
        return value

    def record(self, counts: Mapping[str, int], already: Mapping[str, int]) -> None:
        for topic, partitions in counts.items():
            if topic in already:
                continue
            try:
                self._client.put_row(
                    self._table,
                    Row(self._pk(topic), [(PARTITIONS_COLUMN, partitions)]),
                    Condition(RowExistenceExpectation.EXPECT_NOT_EXIST),
                )
            except OTSServiceError as error:
                if error.get_error_code() != "OTSConditionCheckFail":  # a peer recorded it first: fine
                    raise
