"""Which failure a stopped shard names: the broker refuses a whole batch for one oversize message, so every message
of the batch fails as "too large" and the largest of them is the one to name."""

from __future__ import annotations

import logging

import pytest

from cdcbridge.bridge.processor import BridgeProcessingError
from cdcbridge.coordination.processor import ProcessRecordsInput
from cdcbridge.kafka.errors import MessageTooLargeError, ProduceFatalError

from .test_processor import FakeCheckpointer, make, record


def too_large(key: int, size: int) -> MessageTooLargeError:
    return MessageTooLargeError(f"message for key '[{key}]' on topic cdc.orders.mutation is {size} bytes", size=size)


def test_the_largest_refused_message_of_a_batch_is_named_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    processor, sink = make()
    checkpointer = FakeCheckpointer()
    processor.process_records(ProcessRecordsInput([record(i) for i in range(3)], checkpointer))
    sink.ack(0, too_large(0, 120))
    sink.ack(1, too_large(1, 50_000))
    sink.ack(2, too_large(2, 130))
    with caplog.at_level(logging.ERROR, logger="cdcbridge.bridge.processor"):
        processor._log_failure()
        processor._log_failure()  # the pump's next tick: nothing new to say
    assert [r.getMessage() for r in caplog.records] == [
        "shard shard-0 of table orders stops: message for key '[1]' on topic cdc.orders.mutation is 50000 bytes"
    ]
    with pytest.raises(BridgeProcessingError, match=r"table orders restarts .* key '\[1\]' .* 50000 bytes"):
        processor.process_records(ProcessRecordsInput([record(3)], checkpointer))
    processor._write_checkpoint(final=False)
    assert checkpointer.calls == []  # nothing before the failed batch was acknowledged


def test_other_failures_keep_the_first_one() -> None:
    processor, sink = make()
    checkpointer = FakeCheckpointer()
    processor.process_records(ProcessRecordsInput([record(i) for i in range(2)], checkpointer))
    sink.ack(0, ProduceFatalError("Kafka refused a message for key '[0]': TOPIC_AUTHORIZATION_FAILED"))
    sink.ack(1, too_large(1, 50_000))
    with pytest.raises(BridgeProcessingError, match="TOPIC_AUTHORIZATION_FAILED"):
        processor.process_records(ProcessRecordsInput([record(2)], checkpointer))
