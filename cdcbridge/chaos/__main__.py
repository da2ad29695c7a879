"""`python -m cdcbridge.chaos`: the long form of the chaos suite for people (the CLI wires `cdcbridge chaos`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cdcbridge.chaos.schedule import ALL_KINDS, FaultKind


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdcbridge.chaos", description=__doc__)
    parser.add_argument("--cycles", type=int, default=55, help="fault cycles to run (default 55 = 5 of each kind)")
    parser.add_argument("--duration", type=float, default=None, help="stop injecting after this many seconds")
    parser.add_argument("--workers", type=int, default=2, help="bridge worker processes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", type=Path, default=Path("chaos-report.json"), help="JSON report (+ .txt)")
    parser.add_argument("--rate", type=float, default=40.0, help="source writes per second")
    parser.add_argument("--rows", type=int, default=200, help="distinct source rows the load touches")
    parser.add_argument("--kinds", default=",".join(ALL_KINDS), help="comma-separated fault kinds")
    parser.add_argument("--work-dir", type=Path, default=None, help="logs, stack state, Delta table (kept)")
    parser.add_argument("--keep", action="store_true", help="leave the services running")
    args = parser.parse_args(argv)

    from cdcbridge.chaos.run import run_chaos
    from cdcbridge.observability.logs import configure_logging, quiet_noisy_loggers

    quiet_noisy_loggers()
    configure_logging(level="WARNING")
    kinds = tuple(FaultKind(kind.strip()) for kind in args.kinds.split(",") if kind.strip())
    report = run_chaos(
        args.cycles, args.duration, args.workers, args.seed, args.report, rate=args.rate, rows=args.rows,
        kinds=kinds, work_dir=args.work_dir, keep=args.keep, echo=lambda line: print(line, flush=True),
        interruptible=True,
    )  # fmt: skip
    print("\n".join(["", *report.lines()]), flush=True)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
