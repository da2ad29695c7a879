"""Kafka side of the bridge: topics with fixed partition counts, schema registration, the acknowledging sink."""
