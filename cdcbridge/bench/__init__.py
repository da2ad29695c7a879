"""cdcbridge.bench."""
