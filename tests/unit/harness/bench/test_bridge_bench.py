"""The pieces of the bridge benchmark that need no Kafka: the pre-filled emulator child and the produce order."""

from __future__ import annotations

from cdcbridge.harness.bench.bridge import TABLE, _interleaved, _PrefilledEmulator
from cdcbridge.tablestore import StreamClient, build_ots_client


def test_the_emulator_child_holds_every_change_and_names_each_shards_last_record() -> None:
    emulator = _PrefilledEmulator(records=450, keys=100, shards=2, seed=1)
    try:
        emulator.wait_filled()
        streams = StreamClient(build_ots_client(emulator.url, "bench", "emulator-id", "emulator-secret"))
        stream_id = streams.describe_table_stream(TABLE).stream_id
        last_read = {}
        total = 0
        for shard in streams.list_all_shards(stream_id):
            page = streams.get_stream_record(streams.get_shard_iterator(stream_id, shard.shard_id), 1000, table=TABLE)
            total += len(page.records)
            if page.records:
                last_read[shard.shard_id] = page.records[-1].sequence
                assert all(len(record.cells) == 10 for record in page.records)
        assert total == 450
        assert last_read == emulator.last_sequences and len(last_read) == 2
        assert emulator.cpu_seconds() > 0
    finally:
        emulator.stop()


def test_raw_produce_order_round_robins_over_partitions() -> None:
    per_partition = [[("a", 0)], [("b", 0), ("b", 1), ("b", 2)], [("c", 0), ("c", 1)]]
    assert _interleaved(per_partition) == [("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("b", 2)]
