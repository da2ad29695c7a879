"""Which failure a stopped shard names: the broker refuses a whole batch for one oversize message, so every message
of the batch fails as "too large" and the largest of them is the one to name."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from cdcbridge.bridge.processor import BridgeProcessingError
from cdcbridge.coordination.processor import ProcessRecordsInput
from cdcbridge.kafka.errors import MessageTooLargeError, ProduceFatalError

from .test_processor import FakeCheckpointer, FakeSink, make, record


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


def _with_dead_letters(processor_and_sink: tuple, over_bytes: int = 1000) -> tuple:
    processor, sink = processor_and_sink
    processor._context = replace(processor._context, dead_letter_topic="cdc.dead", dead_letter_over_bytes=over_bytes)
    return processor, sink


def test_an_oversize_message_becomes_a_dead_letter_reference_and_the_checkpoint_moves_on() -> None:
    processor, sink = _with_dead_letters(make())
    checkpointer = FakeCheckpointer()
    records = [record(i) for i in range(3)]
    processor.process_records(ProcessRecordsInput(records, checkpointer))
    sink.ack(0)
    sink.ack(1, too_large(1, 50_000))
    sink.ack(2)
    processor._write_checkpoint(final=False)
    assert checkpointer.calls == [(records[0].sequence, None)], "not past the refused message before its reference"
    processor._send_dead_letters()  # the pump's next tick
    topic, key, value, _ = sink.produced[3]
    assert topic == "cdc.dead" and key == sink.produced[1][1]
    reference = json.loads(value)
    assert reference["table"] == "orders" and reference["topic"] == "cdc.orders.mutation"
    assert reference["size"] == 50_000 and reference["seq_key"] == records[1].sequence.key(0)
    assert reference["reason"] == "message_too_large" and reference["shard_id"] == "shard-0"
    assert sink.headers[3] == [("cdcbridge-dead-letter-reason", b"message_too_large")]
    sink.ack(3)  # the reference is acknowledged: the refused message counts as handled
    processor._write_checkpoint(final=False)
    assert checkpointer.calls[-1] == (records[2].sequence, None)
    processor.process_records(ProcessRecordsInput([record(3)], checkpointer))  # the shard goes on


def test_a_small_message_refused_with_its_batch_is_sent_again_never_dead_lettered() -> None:
    processor, sink = _with_dead_letters(make(), over_bytes=1000)
    checkpointer = FakeCheckpointer()
    processor.process_records(ProcessRecordsInput([record(0)], checkpointer))
    sink.ack(0, too_large(0, 120))  # small: refused only because a large one shared its batch
    processor._send_dead_letters()
    assert [topic for topic, _, _, _ in sink.produced] == ["cdc.orders.mutation"], "no reference for it"
    with pytest.raises(BridgeProcessingError, match="restarts from its checkpoint"):
        processor.process_records(ProcessRecordsInput([record(1)], checkpointer))


class RefusingSink(FakeSink):
    """librdkafka refuses message `refuse_at` before queueing it (larger than the producer's message.max.bytes)."""

    def __init__(self, refuse_at: int) -> None:
        super().__init__()
        self.refuse_at = refuse_at

    def produce_tracked(self, topic, key, value, on_delivery, headers=None) -> None:
        if len(self.produced) == self.refuse_at:
            self.refuse_at = -1
            raise too_large(1, 3_000_000)
        super().produce_tracked(topic, key, value, on_delivery, headers)


def test_a_message_refused_before_queueing_stops_the_shard_or_becomes_a_dead_letter() -> None:
    processor, _ = make()
    sink = RefusingSink(refuse_at=1)
    processor._context = replace(processor._context, sink=sink)
    checkpointer = FakeCheckpointer()
    processor.process_records(ProcessRecordsInput([record(i) for i in range(3)], checkpointer))
    assert len(sink.produced) == 2, "the other messages of the page are still produced"
    with pytest.raises(BridgeProcessingError, match="3000000 bytes"):
        processor.process_records(ProcessRecordsInput([record(3)], checkpointer))

    processor, _ = _with_dead_letters(make())
    sink = RefusingSink(refuse_at=1)
    processor._context = replace(processor._context, sink=sink)
    processor.process_records(ProcessRecordsInput([record(i) for i in range(3)], checkpointer))
    sink.ack(0)
    sink.ack(1)  # record 2's message (record 1's was refused)
    processor._send_dead_letters()
    assert sink.produced[2][0] == "cdc.dead"
    sink.ack(2)  # the reference
    processor._write_checkpoint(final=False)
    assert checkpointer.calls[-1] == (record(2).sequence, None)
