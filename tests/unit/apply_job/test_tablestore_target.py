"""The Tablestore target's BatchWriteRow loop without a server: chunks of ≤ 200 rows and ≤ 4 MiB, guard failures
are not errors, other failed rows are retried, and a row that keeps failing stops the batch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tablestore import OTSClient
from tablestore.retry import DefaultRetryPolicy

from cdcbridge.apply.core.model import ColumnValue, TargetRow
from cdcbridge.apply.errors import TargetError
from cdcbridge.apply.targets.tablestore import (
    CONDITION_FAILED,
    WRITE_BATCH_BYTES,
    TablestoreTarget,
    guard_condition,
    item_data_bytes,
    row_attributes,
    row_from_columns,
    sdk_client,
)
from cdcbridge.config import BridgeConfig, parse_config
from cdcbridge.tablestore.connection import build_ots_client
from cdcbridge.tablestore.retry import StreamRetryPolicy


class FakeClient:
    """Answers BatchWriteRow with scripted per-row failures: failures[n] is the set of row ids failing call n."""

    def __init__(self, failures: list[dict[int, str]]) -> None:
        self.failures = failures
        self.calls: list[list[int]] = []

    def batch_write_row(self, request):
        ((_table, item),) = request.items.items()
        ids = [dict(row_item.row.primary_key)["id"] for row_item in item.row_items]
        failing = self.failures[len(self.calls)] if len(self.calls) < len(self.failures) else {}
        self.calls.append(ids)
        results = []
        for index, row_id in enumerate(ids):
            code = failing.get(row_id)
            results.append(SimpleNamespace(is_ok=code is None, error_code=code, error_message="x", index=index))
        return SimpleNamespace(get_put_by_table=lambda name: results)


def _items(target: TablestoreTarget, count: int):
    from tablestore import PutRowItem, Row

    return [PutRowItem(Row([("id", i)], [("a", 1)]), guard_condition("1")) for i in range(count)]


def test_rows_are_written_in_chunks_of_200_and_failed_rows_retried() -> None:
    client = FakeClient([{3: "OTSServerBusy", 7: CONDITION_FAILED}, {3: "OTSServerBusy"}])
    sleeps: list[float] = []
    target = TablestoreTarget(client, sleep=sleeps.append)
    written = target._batch_write("t", _items(target, 450))
    assert [len(call) for call in client.calls] == [200, 1, 1, 200, 50]
    assert client.calls[1] == [3] and client.calls[2] == [3]
    assert written == 450 - 1  # row 7 failed the guard: already newer, not an error
    assert len(sleeps) == 2


def test_large_rows_are_split_so_no_batch_write_carries_more_than_4_mib() -> None:
    from tablestore import PutRowItem, Row

    client = FakeClient([])
    target = TablestoreTarget(client, sleep=lambda _: None)
    # 1.5 MiB per row (a 1.5 MiB string and two characters' worth of names and key): two rows fit, a third does not.
    big = "é" * (768 * 1024)
    items = [PutRowItem(Row([("id", i)], [("a", big)]), guard_condition("1")) for i in range(5)]
    assert item_data_bytes(items[0]) == len("id") + 8 + len("a") + 1536 * 1024
    written = target._batch_write("t", items)
    assert client.calls == [[0, 1], [2, 3], [4]]
    assert written == 5
    assert all(sum(item_data_bytes(items[i]) for i in call) <= WRITE_BATCH_BYTES for call in client.calls)


def test_a_row_that_keeps_failing_stops_the_batch() -> None:
    client = FakeClient([{1: "OTSInternalServerError"}] * 3)
    target = TablestoreTarget(client, max_attempts=3, sleep=lambda _: None)
    with pytest.raises(TargetError, match=r"1 rows still failing after 3 attempts.*OTSInternalServerError"):
        target._batch_write("t", _items(target, 5))


def test_a_row_round_trips_through_its_attribute_columns() -> None:
    row = TargetRow("t", (("id", 1),), {"a": ColumnValue(b"\x01", 3), "b": ColumnValue(2.5, None)}, "9" * 46,
                    False, 7)  # fmt: skip
    attributes = [(name, bytes(v) if isinstance(v, bytearray) else v) for name, v in row_attributes(row)]
    assert row_from_columns("t", row.pk, attributes) == row
    from tablestore import ComparatorType

    condition = guard_condition("5").column_condition
    assert (condition.column_name, condition.comparator, condition.pass_if_missing) == (
        "_seq",
        ComparatorType.LESS_THAN,
        True,
    )


def _config(apply: dict | None = None, **source) -> BridgeConfig:
    return parse_config({"source": {"tables": [{"name": "t"}], **source}, "apply": apply or {}}, environ={})


def test_the_target_builds_a_plain_sdk_client_with_the_sdk_retry_policy() -> None:
    build_ots_client("http://source:8900", "cdcbridge", "id", "secret")  # the bridge's kind of client
    client = sdk_client(_config({"tablestore_endpoint": "http://target:8900", "tablestore_instance": "copy"}))
    assert type(client) is OTSClient
    assert isinstance(client.retry_policy, DefaultRetryPolicy) and not isinstance(
        client.retry_policy, StreamRetryPolicy
    )
    assert (
        "GetStreamRecord" not in client.protocol.encoder.api_encode_map
    )  # the stream APIs are the bridge's, not the target's
    assert client.protocol.instance_name == "copy"


def test_source_credentials_carry_their_sts_token_and_the_targets_own_keys_do_not() -> None:
    temporary = {"access_key_id": "sts-id", "access_key_secret": "sts-secret", "sts_token": "token-1"}
    borrowed = sdk_client(_config(**temporary))
    own = sdk_client(
        _config({"tablestore_access_key_id": "own-id", "tablestore_access_key_secret": "own-secret"}, **temporary)
    )
    assert borrowed.credentials_provider.get_credentials().get_security_token() == "token-1"
    assert own.credentials_provider.get_credentials().get_security_token() is None


def test_an_empty_target_setting_is_named_in_the_error() -> None:
    with pytest.raises(TargetError, match=r"endpoint is empty.*apply\.tablestore_endpoint"):
        sdk_client(_config(endpoint=""))
