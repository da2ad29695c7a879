"""`python -m cdcbridge` runs the command line (the stack starts the emulator this way)."""

from cdcbridge.cli import main

main()
