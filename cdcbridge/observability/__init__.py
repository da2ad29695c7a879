"""cdcbridge.observability: what an operator sees of a running process.

- :mod:`~cdcbridge.observability.metrics`: every Prometheus metric (``WorkerMetrics``, ``ApplyMetrics``) and the
  endpoint (``start_metrics_server``).
- :mod:`~cdcbridge.observability.logs`: ``configure_logging`` (text or JSON lines, secrets masked, noisy loggers quiet).
- :mod:`~cdcbridge.observability.redaction`: ``register_secret`` / ``redact`` for anything else that leaves the
  process as text (error messages, ``status`` output).
"""
