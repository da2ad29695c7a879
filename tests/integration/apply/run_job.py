"""Runs the apply job in its own process for the kill test: optionally hangs right after the target committed
batch N on either path (before Spark commits the batch to its checkpoint), so the test can SIGKILL it there; with
--continuous it runs until SIGTERM; with --dump it pickles the Delta tables' rows once the job ended (for tables on
s3a://, which only a session holding the S3A jars can read)."""

from __future__ import annotations

import logging
import pickle
import sys
import time
from pathlib import Path

import click

from cdcbridge.apply.job import run_apply
from cdcbridge.apply.spark.session import build_spark_session
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.apply.targets.delta_pending_append import DeltaPendingAppend
from cdcbridge.config import BridgeConfig, load_config
from cdcbridge.harness.stack.spark import apply_paths, local_spark_settings


@click.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--hang-after-write", type=int, default=None, help="Hang once the target committed this batch id.")
@click.option("--flag", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Written when it hangs.")
@click.option("--continuous", is_flag=True, help="Run until SIGTERM instead of availableNow.")
@click.option("--dump", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Pickle {table: rows as dicts} of the configured tables here after the job ended.")  # fmt: skip
def main(config: Path, hang_after_write: int | None, flag: Path | None, continuous: bool, dump: Path | None) -> None:
    """Run the apply job of CONFIG (a BridgeConfig as JSON, or a YAML file with ${ENV} references) once, or until
    SIGTERM with --continuous."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
    if config.suffix in {".yaml", ".yml"}:
        job_config = load_config(config)
    else:
        job_config = BridgeConfig.model_validate_json(config.read_text())
    # as `cdcbridge apply` does
    job_config = job_config.with_spark(local_spark_settings(job_config.apply.spark, paths=apply_paths(job_config)))
    if hang_after_write is not None:
        if flag is None:
            raise click.UsageError("--hang-after-write needs --flag")
        original, original_folded = DeltaTarget.write, DeltaTarget.write_folded
        original_pending = DeltaPendingAppend.commit

        def hang_after(marker) -> None:
            if marker.batch_id >= hang_after_write:
                written = flag.with_suffix(".part")
                written.write_text(str(marker.batch_id))
                written.rename(flag)  # whole, so the test never reads it half written
                time.sleep(3600)

        def write_then_hang(self, batch):  # the reference path's commit
            written = original(self, batch)
            hang_after(batch.marker)
            return written

        def write_folded_then_hang(self, marker, tables):  # the Spark path's commits
            written = original_folded(self, marker, tables)
            hang_after(marker)
            return written

        def commit_then_hang(self, marker):  # the Spark path's commit of a batch written before its checks
            original_pending(self, marker)
            hang_after(marker)

        DeltaTarget.write = write_then_hang
        DeltaTarget.write_folded = write_folded_then_hang
        DeltaPendingAppend.commit = commit_then_hang
    spark = build_spark_session("cdcbridge-apply", job_config.apply.spark) if dump is not None else None
    try:
        summary = run_apply(job_config, once=not continuous, spark=spark)
        click.echo("\n".join(summary.lines()))
        if spark is not None and dump is not None:
            root = job_config.apply.delta_path.rstrip("/")
            tables = {
                t.name: spark.read.format("delta").load(f"{root}/{t.name}").collect() for t in job_config.source.tables
            }
            dump.write_bytes(pickle.dumps({name: [row.asDict() for row in rows] for name, rows in tables.items()}))
    finally:
        if spark is not None:
            spark.stop()


if __name__ == "__main__":
    main()
