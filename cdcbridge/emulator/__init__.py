"""cdcbridge.emulator."""
