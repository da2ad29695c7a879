"""cdcbridge.formats."""
