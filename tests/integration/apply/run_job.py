"""Runs the apply job in its own process for the kill test: optionally hangs right after the target committed
batch N on either path (before Spark commits the batch to its checkpoint), so the test can SIGKILL it there; with
--continuous it runs until SIGTERM."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import click

from cdcbridge.apply.job import run_apply
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.config import BridgeConfig
from cdcbridge.harness.stack.spark import local_spark_settings


@click.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--hang-after-write", type=int, default=None, help="Hang once the target committed this batch id.")
@click.option("--flag", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Written when it hangs.")
@click.option("--continuous", is_flag=True, help="Run until SIGTERM instead of availableNow.")
def main(config: Path, hang_after_write: int | None, flag: Path | None, continuous: bool) -> None:
    """Run the apply job of CONFIG (a BridgeConfig as JSON) once, or until SIGTERM with --continuous."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
    job_config = BridgeConfig.model_validate_json(config.read_text())
    job_config = job_config.with_spark(local_spark_settings(job_config.apply.spark))  # as `cdcbridge apply` does
    if hang_after_write is not None:
        if flag is None:
            raise click.UsageError("--hang-after-write needs --flag")
        original, original_folded = DeltaTarget.write, DeltaTarget.write_folded

        def hang_after(marker) -> None:
            if marker.batch_id >= hang_after_write:
                flag.write_text(str(marker.batch_id))
                time.sleep(3600)

        def write_then_hang(self, batch):  # the reference path's commit
            written = original(self, batch)
            hang_after(batch.marker)
            return written

        def write_folded_then_hang(self, marker, tables):  # the Spark path's commits
            written = original_folded(self, marker, tables)
            hang_after(marker)
            return written

        DeltaTarget.write = write_then_hang
        DeltaTarget.write_folded = write_folded_then_hang
    summary = run_apply(job_config, once=not continuous)
    click.echo("\n".join(summary.lines()))


if __name__ == "__main__":
    main()
