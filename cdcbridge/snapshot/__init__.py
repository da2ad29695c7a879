"""Base + incremental replication (DESIGN §8): export a table's existing rows, then stream from a start taken
before the export began.

- :mod:`.runner`      `cdcbridge snapshot`: per table, start position, key ranges, parallel export, done.
- :mod:`.export`      the parallel range export (GetRange pages → PUT images → Kafka, progress after acks).
- :mod:`.split_points` ComputeSplitPointsBySize through the SDK, and the key ranges it gives.
- :mod:`.state`       the snapshot's rows in the status table (start position, per-range progress).
- :mod:`.stream_start` what the bridge workers do with a stored start (skip older records; wait while it runs).

Import the modules themselves; this package imports nothing at load time so the bridge can use
:mod:`.stream_start` without pulling in the exporter.
"""
