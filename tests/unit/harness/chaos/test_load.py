"""The chaos load: seeded operations and outcome classification (a fake client, no servers)."""

from __future__ import annotations

from typing import Any

from tablestore.error import OTSClientError, OTSServiceError

from cdcbridge.harness.chaos.load import LoadGenerator, Operation, Outcome, classify_failure


class RecordingClient:
    def __init__(self, fail_with: BaseException | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail_with = fail_with

    def __getattr__(self, api: str) -> Any:
        def call(*args: Any) -> None:
            self.calls.append((api, args))
            if self.fail_with is not None:
                raise self.fail_with

        return call


def draw(seed: int, count: int) -> tuple[list[Operation], list[str]]:
    client = RecordingClient()
    generator = LoadGenerator(client, "t", rows=50, rate=100, seed=seed)
    operations = []
    for _ in range(count):
        operation, write = generator._next_write()
        write()
        operations.append(operation)
    return operations, [api for api, _ in client.calls]


def test_the_mix_is_seeded_and_contains_every_operation_kind() -> None:
    operations, apis = draw(seed=5, count=400)
    assert set(operations) == set(Operation)
    assert set(apis) == {"put_row", "update_row", "delete_row", "batch_write_row"}
    assert draw(seed=5, count=400) == (operations, apis)
    assert draw(seed=6, count=400)[0] != operations


def test_an_answered_error_is_refused_and_a_lost_answer_is_ambiguous() -> None:
    assert classify_failure(OTSServiceError(503, "OTSServerBusy", "busy")) is Outcome.REFUSED
    assert classify_failure(OTSClientError("connection reset")) is Outcome.AMBIGUOUS
    assert classify_failure(ConnectionResetError()) is Outcome.AMBIGUOUS
    generator = LoadGenerator(RecordingClient(), "t", rows=5, rate=100, seed=1)
    assert generator._attempt(lambda: None) is Outcome.OK
    assert generator._attempt(RecordingClient(OTSClientError("reset")).put_row) is Outcome.AMBIGUOUS


def test_a_batch_with_some_rows_refused_counts_as_refused() -> None:
    class PartlyFailed:
        def is_all_succeed(self) -> bool:
            return False

    generator = LoadGenerator(RecordingClient(), "t", rows=5, rate=100, seed=1)
    assert generator._attempt(PartlyFailed) is Outcome.REFUSED
