"""`cdcbridge snapshot --config FILE` as its own process (the kill test needs one to SIGKILL), until the CLI
command is wired: loads the YAML configuration, logs to stdout, exits 0 once every table is done."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

import click

from cdcbridge.config import load_config
from cdcbridge.snapshot.runner import run_snapshot


@click.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def main(config: Path) -> None:
    """Snapshot the tables of CONFIG (YAML), one line per finished table."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    for result in run_snapshot(load_config(config), stop):
        click.echo(result.line())


if __name__ == "__main__":
    main()
