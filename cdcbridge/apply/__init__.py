"""The apply job: reads the bridge's topics and applies each row's changes, in seq order and guarded, to a target.

Layers, bottom up (each imports only those below it; checked by the import contract in pyproject.toml):

- ``errors``: the one exception family of the job.
- ``core/``: the pure rules (decode an envelope, drop redeliveries, fold through the seq guard, batch marker,
  bad-input policy, purge). No Spark, no I/O.
- ``driver/``: the reference path, one micro-batch applied on the driver with the core.
- ``spark/``: the same rules in the JVM (decode, normalize, fold, write), and the Spark session.
- ``targets/``: Delta Lake, PostgreSQL and Tablestore.
- ``job``, ``routing``, ``kafka_source``, ``writer_schemas``, ``batch_report``: the streaming job's wiring.
"""
