"""cdcbridge.coordination."""
