"""cdcbridge.apply."""
