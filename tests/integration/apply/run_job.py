"""Runs the apply job in its own process for the kill test: optionally hangs right after the target committed
batch N on either path (before Spark commits the batch to its checkpoint), so the test can SIGKILL it there; with
--continuous it runs until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from cdcbridge.apply.job import run_apply
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.config import BridgeConfig
from cdcbridge.harness.stack.spark import local_spark_settings


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--hang-after-write", type=int, default=None)
    parser.add_argument("--flag", default=None)
    parser.add_argument("--continuous", action="store_true", help="run until SIGTERM instead of availableNow")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
    config = BridgeConfig.model_validate_json(Path(args.config).read_text())
    config = config.with_spark(local_spark_settings(config.apply.spark))  # as `cdcbridge apply` does
    if args.hang_after_write is not None:
        original, original_folded = DeltaTarget.write, DeltaTarget.write_folded

        def hang_after(marker) -> None:
            if marker.batch_id >= args.hang_after_write:
                Path(args.flag).write_text(str(marker.batch_id))
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
    summary = run_apply(config, once=not args.continuous)
    print("\n".join(summary.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
