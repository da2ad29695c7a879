"""cdcbridge.observability."""
