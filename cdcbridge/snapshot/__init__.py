"""Base + incremental replication (DESIGN §8): export a table's existing rows, then stream from a start taken
before the export began; and `end_time`, which ends replication once every shard has passed a given time.

- :mod:`.runner`      `cdcbridge snapshot`: per table, start position, key ranges, parallel export, done.
- :mod:`.export`      the parallel range export (GetRange pages → PUT images → Kafka, progress after acks).
- :mod:`.split_points` ComputeSplitPointsBySize through the SDK, and the key ranges it gives.
- :mod:`.state`       the snapshot's rows in the status table (start position, per-range progress).
- :mod:`.stream_start` what the bridge workers do with a stored start (skip older records; wait while it runs).
- :mod:`.end_time`    per-shard progress towards `bridge.end_time` and the watch that stops a worker there.

Import the modules themselves; this package imports nothing at load time so the bridge can use
:mod:`.stream_start` without pulling in the exporter.
"""
