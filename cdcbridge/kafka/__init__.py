"""cdcbridge.kafka."""
