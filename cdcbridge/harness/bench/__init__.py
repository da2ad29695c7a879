"""cdcbridge.harness.bench."""
