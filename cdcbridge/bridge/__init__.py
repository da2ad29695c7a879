"""The bridge: a record processor wiring coordination, formats and the Kafka sink, and how its workers end
(:mod:`.end_time`: per-shard progress towards `bridge.end_time` and the watch that stops a worker there)."""
