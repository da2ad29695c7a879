"""The `cdcbridge` command line. Every command exits 0 on success and non-zero with a one-line reason."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cdcbridge.harness.stack.paths import default_state_dir

if TYPE_CHECKING:
    from cdcbridge.config import BridgeConfig
    from cdcbridge.tablestore.table_admin import TableAdmin


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--debug", is_flag=True, envvar="CDCBRIDGE_DEBUG", help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """cdcbridge: Tablestore change streams to Kafka (Avro), applied downstream by Spark."""
    ctx.obj = {"debug": debug}


# ---------------------------------------------------------------------------------------------------------- stack
@cli.group()
def stack() -> None:
    """Run the local stack (Kafka, Apicurio Registry, Tablestore emulator) as background processes."""


_state_dir_option = click.option(
    "--state-dir", type=click.Path(path_type=Path), default=default_state_dir, show_default=".state/stack",
    help="Folder for pid files, logs and service data.",
)  # fmt: skip


@stack.command("up")
@_state_dir_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address every service binds to.")
@click.option("--kafka-port", type=int, default=9092, show_default=True, help="0 picks a free port.")
@click.option("--kafka-controller-port", type=int, default=9093, show_default=True)
@click.option("--registry-port", type=int, default=8081, show_default=True)
@click.option("--emulator-port", type=int, default=8900, show_default=True)
@click.option("--no-emulator", is_flag=True, help="Only Kafka and the registry (e.g. for a real Tablestore).")
@click.option("--advertised-host", default=None, help="What Kafka tells clients when --host is 0.0.0.0.")
def stack_up(state_dir: Path, host: str, kafka_port: int, kafka_controller_port: int, registry_port: int,
             emulator_port: int, no_emulator: bool, advertised_host: str | None) -> None:  # fmt: skip
    """Fetch what is missing (Maven), start the services, wait until each answers, print the endpoints."""
    from cdcbridge.harness.stack.stack import SERVICES, LocalStack, StackPorts

    services = tuple(s for s in SERVICES if not (no_emulator and s == "emulator"))
    ports = StackPorts(kafka_port, kafka_controller_port, registry_port, emulator_port)
    endpoints = LocalStack(state_dir, host, advertised_host).up(ports, services)
    click.echo(f"kafka      {endpoints.kafka_bootstrap}")
    click.echo(f"registry   {endpoints.registry_url}")
    if endpoints.emulator_url:
        click.echo(f"emulator   {endpoints.emulator_url}")
    click.echo(f"state      {state_dir}")


@stack.command("down")
@_state_dir_option
def stack_down(state_dir: Path) -> None:
    """Stop the processes `stack up` started (and nothing else)."""
    from cdcbridge.harness.stack.stack import LocalStack

    stopped = LocalStack(state_dir).down()
    click.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@stack.command("status")
@_state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def stack_status(state_dir: Path, as_json: bool) -> None:
    """Tell which services run, with pid, endpoint and log file."""
    from cdcbridge.harness.stack.stack import LocalStack

    status = LocalStack(state_dir).status()
    if as_json:
        click.echo(json.dumps(status, indent=2))
        return
    if not status:
        click.echo(f"no services recorded in {state_dir}")
    for name, info in status.items():
        state = "running" if info["running"] else "NOT running"
        click.echo(f"{name:<10} {state:<12} pid {info['pid']:<8} {info['endpoint']}  log {info['log']}")


@stack.command("fetch")
def stack_fetch() -> None:
    """Fetch the JVM artifacts (Kafka, Apicurio, Spark connectors; in a checkout also the Java conformance suite)
    from Maven Central into the cache."""
    from cdcbridge.harness.stack.artifacts import COMPONENTS, available_test_components, ensure_all

    for component, path in ensure_all((*COMPONENTS, *available_test_components())).items():
        click.echo(f"{component:<12} {path}")


# ---------------------------------------------------------------------------------------------------------- run
_config_option = click.option(
    "--config", "config_path", type=click.Path(path_type=Path), envvar="CDCBRIDGE_CONFIG", required=True,
    help="YAML configuration file (or CDCBRIDGE_CONFIG).",
)  # fmt: skip


def _stop_on_sigterm() -> threading.Event:
    """SIGTERM and SIGINT set the returned event: the worker drains, checkpoints and releases its leases."""
    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


@cli.command("run")
@_config_option
@click.option("--worker-id", default=None, help="Unique per running process (default: host-pid).")
@click.option(
    "--end-time",
    default=None,
    metavar="ISO8601",
    help="Replicate changes committed up to this time (with a timezone, e.g. 2025-06-01T12:00:00Z), then exit 0 "
    "once every shard passed it (overrides bridge.end_time).",
)
def run(config_path: Path, worker_id: str | None, end_time: str | None) -> None:
    """Run one bridge worker: read the configured tables' streams and produce their changes to Kafka."""
    from cdcbridge.bridge.app import run_bridge
    from cdcbridge.config import parse_end_time

    config = _load_config(config_path)
    if end_time is not None:
        config = config.with_end_time(parse_end_time(end_time))
    run_bridge(config, worker_id, _stop_on_sigterm(), own_process=True)


@cli.group("snapshot", invoke_without_command=True)
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), envvar="CDCBRIDGE_CONFIG",
    help="YAML configuration file (or CDCBRIDGE_CONFIG).",
)  # fmt: skip
@click.option("--table", default=None, help="Re-snapshot this table while the workers keep streaming (incremental).")
@click.option("--from", "begin", default=None, metavar="PK", help="First key (inclusive): NAME=VALUE,... in key order.")
@click.option("--to", "end", default=None, metavar="PK", help="Last key (exclusive): NAME=VALUE,... in key order.")
@click.option("--rows-per-second", type=float, default=None, help="Read at most this many rows per second.")
@click.option("--chunk-rows", type=click.IntRange(1, 5000), default=None, help="Rows per chunk (one window/fence).")
@click.option("--id", "snapshot_id", default=None, help="Resume this incremental snapshot (see `cdcbridge status`).")
@click.pass_context
def snapshot(ctx: click.Context, config_path: Path | None, table: str | None, begin: str | None, end: str | None,
             rows_per_second: float | None, chunk_rows: int | None, snapshot_id: str | None) -> None:  # fmt: skip
    """Export the configured tables' existing rows before the workers start (base + incremental), or with --table
    re-snapshot one table or key range while the workers keep streaming (incremental snapshot; README
    "Incremental snapshots").

    \b
    --from/--to take primary-key columns in key order, left-out columns are -inf:
      --from region=eu --to region=us     every eu row
      --from region=eu,id=100             from (eu, 100) on
    INTEGER values as numbers, STRING as written, BINARY as base64.
    """
    if ctx.invoked_subcommand is not None:
        return
    if config_path is None:
        raise click.UsageError("Missing option '--config' (or set CDCBRIDGE_CONFIG).")
    if table is None and (begin or end or rows_per_second or chunk_rows or snapshot_id):
        raise click.UsageError("--from, --to, --rows-per-second, --chunk-rows and --id need --table")
    config = _load_config(config_path)
    if table is None:
        from cdcbridge.snapshot.runner import run_snapshot

        for result in run_snapshot(config, _stop_on_sigterm()):
            click.echo(result.line())
        return
    from cdcbridge.snapshot.incremental_runner import SnapshotRequest, run_incremental_snapshot
    from cdcbridge.snapshot.incremental_state import IncrementalState

    request = SnapshotRequest(table, begin, end, rows_per_second, chunk_rows, snapshot_id)
    result = run_incremental_snapshot(config, request, _stop_on_sigterm())
    click.echo(result.line())
    if result.state is not IncrementalState.DONE:
        sys.exit(1)


def _snapshot_state_command(action: str, help_text: str) -> None:
    @snapshot.command(action, help=help_text)
    @_config_option
    @click.option("--table", required=True, help="The table whose incremental snapshot(s) to change.")
    @click.option("--id", "snapshot_id", default=None, help="Only this snapshot (default: every one it applies to).")
    def command(config_path: Path, table: str, snapshot_id: str | None) -> None:
        from cdcbridge.snapshot.incremental_runner import change_snapshot_state

        for line in change_snapshot_state(_load_config(config_path), table, action, snapshot_id):
            click.echo(line)


_snapshot_state_command("pause", "Pause a table's incremental snapshot after its current chunk (holds released).")
_snapshot_state_command("resume", "Resume a paused incremental snapshot.")
_snapshot_state_command("cancel", "Cancel a table's incremental snapshot (its open chunk is abandoned).")


@snapshot.command("run-pending")
@_config_option
def snapshot_run_pending(config_path: Path) -> None:
    """Run the PENDING incremental snapshots (requests written as signal rows) of the configured tables."""
    from cdcbridge.snapshot.incremental_runner import run_pending_snapshots
    from cdcbridge.snapshot.incremental_state import IncrementalState

    results = run_pending_snapshots(_load_config(config_path), _stop_on_sigterm())
    for result in results:
        click.echo(result.line())
    if not results:
        click.echo("no pending incremental snapshots")
    if any(result.state is not IncrementalState.DONE for result in results):
        sys.exit(1)


#: The configured Tablestore endpoints and the settings that name them, for the one-line error of an unreachable one.
_TABLESTORE_ENDPOINTS: dict[str, str] = {}


def _load_config(config_path: Path) -> BridgeConfig:
    """Read the configuration, set up logging from it, and remember which setting names which Tablestore endpoint."""
    from cdcbridge.config import load_config

    config = load_config(config_path)
    _configure_logging(config)
    _TABLESTORE_ENDPOINTS.clear()
    if config.apply.tablestore_endpoint:
        _TABLESTORE_ENDPOINTS[_endpoint_key(config.apply.tablestore_endpoint)] = "apply.tablestore_endpoint"
    _TABLESTORE_ENDPOINTS[_endpoint_key(config.source.endpoint)] = "source.endpoint"
    return config


def _endpoint_key(url: str) -> str:
    """scheme://host:port with the scheme's default port filled in, so a URL and urllib3's pool compare equal."""
    from urllib3.util import parse_url

    parsed = parse_url(url.strip())
    scheme = (parsed.scheme or "http").lower()
    port = parsed.port or (443 if scheme == "https" else 80)
    return f"{scheme}://{(parsed.host or '').lower()}:{port}"


def _error_line(error: Exception) -> str:
    """The one line an error is reported with: a configured Tablestore endpoint that cannot be reached is the whole
    story (whatever operation ran into it), so it is said as such, with the setting to check."""
    from cdcbridge.tablestore.errors import transport_failure

    failure = transport_failure(error) if _TABLESTORE_ENDPOINTS else None
    if failure is not None and failure.connecting and failure.endpoint:
        setting = _TABLESTORE_ENDPOINTS.get(_endpoint_key(failure.endpoint))
        if setting is not None:
            return f"{failure.describe()}: check {setting} and that Tablestore runs there"
    return str(error)


def _configure_logging(config: object) -> None:
    """Logging per the config, and every secret of the config registered with the redaction filter."""
    from cdcbridge.observability.logs import configure_logging, register_connection_secret

    observability = config.observability  # type: ignore[attr-defined]
    configure_logging(level=observability.log_level, fmt=observability.log_format)
    for secret in _secrets_of(config):
        # Connection-style secrets (a DSN, user:password) also have their password part registered alone.
        register_connection_secret(secret)


def _secrets_of(config: object) -> list[str]:
    """Every SecretStr value in the configuration, and the values of free-form settings whose name says they are
    secret (apply.spark.conf's spark.hadoop.fs.s3a.secret.key, kafka_options' sasl.password)."""
    from pydantic import BaseModel, SecretStr

    from cdcbridge.observability.redaction import is_secret_setting

    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, SecretStr):
            found.append(node.get_secret_value())
        elif isinstance(node, BaseModel):
            for name in type(node).model_fields:
                walk(getattr(node, name))
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and isinstance(key, str) and is_secret_setting(key):
                    found.append(value)
                else:
                    walk(value)

    walk(config)
    return [s for s in found if s]


# ---------------------------------------------------------------------------------------------------------- table
@cli.group()
def table() -> None:
    """Set up source tables (real Tablestore or the emulator), with the connection settings of `cdcbridge run`."""


def _table_admin(config_path: Path) -> TableAdmin:
    """The table set-up calls on the configured source instance (`source.endpoint`, credentials, region)."""
    from cdcbridge.publish.tables import source_client
    from cdcbridge.tablestore.client import StreamClient
    from cdcbridge.tablestore.table_admin import TableAdmin

    config = _load_config(config_path)
    return TableAdmin(StreamClient(source_client(config), check_crc=config.source.check_crc))


_expiration_option = click.option(
    "--expiration-hours", type=int, default=24, show_default=True, help="How long the stream keeps records (1-168)."
)


@table.command("create")
@click.argument("name")
@_config_option
@click.option(
    "--pk",
    "primary_key",
    required=True,
    metavar="NAME:TYPE,...",
    help="Primary-key columns in order; types: string, integer, binary (e.g. id:string,seq:integer).",
)
@click.option("--stream", is_flag=True, help="Create the table with its stream on (what the bridge reads).")
@_expiration_option
@click.option(
    "--if-not-exists",
    is_flag=True,
    help="Succeed when the table exists with this primary key (turning its stream on if --stream).",
)
def table_create(name: str, config_path: Path, primary_key: str, stream: bool, expiration_hours: int,
                 if_not_exists: bool) -> None:  # fmt: skip
    """Create table NAME with the given primary key (max versions 1, no TTL)."""
    from cdcbridge.tablestore.table_admin import parse_primary_key

    columns = parse_primary_key(primary_key)
    admin = _table_admin(config_path)
    created = admin.create(
        name, columns, stream_hours=expiration_hours if stream else None, if_not_exists=if_not_exists
    )
    click.echo(f"{'created' if created else 'exists:'} table {name}")
    for line in admin.describe(name).lines()[1:]:
        click.echo(line)


@table.command("enable-stream")
@click.argument("name")
@_config_option
@_expiration_option
def table_enable_stream(name: str, config_path: Path, expiration_hours: int) -> None:
    """Turn on the stream of table NAME, so the bridge can replicate it."""
    description = _table_admin(config_path).enable_stream(name, expiration_hours)
    click.echo(f"stream enabled on table {name}")
    for line in description.lines()[1:]:
        click.echo(line)


@table.command("describe")
@click.argument("name")
@_config_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def table_describe(name: str, config_path: Path, as_json: bool) -> None:
    """Primary key, stream (id, retention) and shards of table NAME."""
    description = _table_admin(config_path).describe(name)
    if as_json:
        click.echo(json.dumps(description.as_dict(), indent=2))
        return
    for line in description.lines():
        click.echo(line)


@cli.command("status")
@_config_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--no-lag", is_flag=True, help="Skip reading the streams to compute lag (faster).")
@click.option("--end-time", default=None, metavar="ISO8601", help="Show per shard the time reached against this end.")
def status(config_path: Path, as_json: bool, no_lag: bool, end_time: str | None) -> None:
    """Leases (shard, owner, checkpoint, parents, stealer, last renewal), lag per shard, topic partitions."""
    from cdcbridge.bridge.status import collect_status, render_text
    from cdcbridge.config import parse_end_time
    from cdcbridge.observability.redaction import redact

    config = _load_config(config_path)
    cluster = collect_status(config, with_lag=not no_lag, end_time=parse_end_time(end_time) if end_time else None)
    click.echo(redact(json.dumps(cluster.as_dict(), indent=2) if as_json else render_text(cluster)))


# ---------------------------------------------------------------------------------------------------------- emulator
@cli.command("emulator")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback unless told otherwise)."
)
@click.option("--port", type=int, default=8900, show_default=True)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep tables, rows and streams here across restarts (default: in memory).",
)
@click.option("--access-key-id", default="emulator-id", show_default=True, envvar="EMULATOR_ACCESS_KEY_ID")
@click.option(
    "--access-key-secret",
    default="emulator-secret",
    show_default=False,
    envvar="EMULATOR_ACCESS_KEY_SECRET",
    help="Secret that request signatures are checked with  [default: emulator-secret]",
)
@click.option(
    "--region",
    default=None,
    envvar="EMULATOR_REGION",
    show_envvar=True,
    help="The instance's region (e.g. cn-hangzhou): V4 signatures for another region get 403 OTSAuthFailed, as "
    "on the service  [default: any region signs]",
)
@click.option(
    "--sts-token",
    default=None,
    envvar="EMULATOR_STS_TOKEN",
    show_envvar=True,
    show_default=False,
    help="Make the access key temporary (STS) credentials: every request must carry this token. Without it, a "
    "request that carries a token gets 403 OTSAuthFailed.",
)
@click.option(
    "--increments-as-deltas",
    is_flag=True,
    help="Emulate a source that records deltas (the SDS / MUTATE_LOG case): increments appear in stream records as "
    "INCREMENT cells (type 0x04) carrying the delta. Real Tablestore streams show an increment as a PUT of the "
    "resulting value (the default here), and the official Java SDK refuses INCREMENT cells in stream records "
    "(IOException: Unknown cell type:4), so Java stream clients cannot read this mode.",
)
def emulator(host: str, port: int, data_dir: Path | None, access_key_id: str, access_key_secret: str,
             region: str | None, sts_token: str | None, increments_as_deltas: bool) -> None:  # fmt: skip
    """Run the Tablestore-protocol emulator (the official SDK talks to it unchanged).

    \b
    Verifies V2 and V4 request signatures (bad ones get 403 OTSAuthFailed) and signs responses; any instance
    name is accepted. Tables, rows with versions, conditional writes, batch and range reads, and streams
    (ListStream, DescribeStream, GetShardIterator, GetStreamRecord) behave as the service does.
    Admin endpoints (JSON, same port):
      GET  /_emulator/health
      POST /_emulator/split   {"table", "shard_id"}                    -> {"children": [...]}
      POST /_emulator/merge   {"table", "shard_id", "sibling_shard_id"} -> {"child": ...}
      POST /_emulator/trim    {"table", "before_ms"}
      POST /_emulator/faults  inject latency, errors, throttling, dropped responses
    """
    from cdcbridge.emulator.server import serve_forever_cli

    serve_forever_cli(
        host, port, data_dir, access_key_id, access_key_secret, increments_as_deltas, region=region, sts_token=sts_token
    )


# ---------------------------------------------------------------------------------------------------------- bench
@cli.group()
@click.option(
    "--results",
    type=click.Path(path_type=Path),
    default=Path("benchmarks/results.json"),
    show_default=True,
    help="JSON file the figures are written to.",
)
@click.pass_context
def bench(ctx: click.Context, results: Path) -> None:
    """Measure speed and memory; figures go to a JSON file that BENCHMARKS.md is generated from."""
    ctx.obj["results"] = results


def _report(ctx: click.Context, name: str, figures: dict) -> None:
    from cdcbridge.harness.bench.results import record_result

    record_result(name, figures, ctx.obj["results"])
    for key, value in figures.items():
        click.echo(f"{key:<28} {value}")


@bench.command("decode")
@click.option("--records", default=200_000, show_default=True)
@click.option("--implementation", type=click.Choice(["auto", "c", "python"]), default="auto", show_default=True)
@click.pass_context
def bench_decode(ctx: click.Context, records: int, implementation: str) -> None:
    """Stream-record decoding (PlainBuffer → ChangeRecord) of realistic 10-column rows, CRC off and on."""
    from cdcbridge.harness.bench.decode import run_decode_bench

    off = run_decode_bench(records=records, check_crc=False, implementation=implementation)
    on = run_decode_bench(records=records, check_crc=True, implementation=implementation)
    _report(
        ctx,
        "decode",
        {
            "records": records,
            "rows_per_s_crc_off": round(off["rows_per_s"]),
            "rows_per_s_crc_on": round(on["rows_per_s"]),
            "implementation": off["implementation"],
        },
    )


@bench.command("emulator")
@click.option("--rows", default=50_000, show_default=True, help="Rows written with BatchWriteRow, then read back.")
@click.pass_context
def bench_emulator(ctx: click.Context, rows: int) -> None:
    """The emulator: BatchWriteRow rows/s and GetStreamRecord records/s, through the SDK and server-side."""
    from cdcbridge.harness.bench.emulator import run_emulator_bench

    figures = run_emulator_bench(rows=rows)
    _report(ctx, "emulator", {k: v for k, v in figures.items() if not isinstance(v, dict | list)})


@bench.command("failover")
@click.option("--fast", is_flag=True, help="Short lease timings (4 s lease, 1 s take) instead of the defaults.")
@click.option("--handoff-samples", default=3, show_default=True)
@click.option("--failover-samples", default=2, show_default=True)
@click.option("--seed", type=int, default=None)
@click.pass_context
def bench_failover(ctx: click.Context, fast: bool, handoff_samples: int, failover_samples: int,
                   seed: int | None) -> None:  # fmt: skip
    """Failover after kill -9, hand-off on SIGTERM, rebalance when a second worker joins 8 shards."""
    from cdcbridge.harness.bench.failover import run_failover_bench

    figures = run_failover_bench(fast=fast, handoff_samples=handoff_samples, failover_samples=failover_samples,
                                 seed=seed)  # fmt: skip
    _report(ctx, "failover" + ("-fast" if fast else ""), figures)


@bench.command("apply")
@click.option("--batch-sizes", default="10000,100000", show_default=True, help="Records per micro-batch, comma list.")
@click.option("--batches", default=3, show_default=True, help="Batches per size and target.")
@click.option("--targets", default="delta,postgres", show_default=True)
@click.option("--warmup-batches", default=4, show_default=True, help="Unreported batches of every size run first.")
@click.option("--first-load-rows", default=500_000, show_default=True, help="Rows of the first-load run (0: skip).")
@click.option("--first-load-rounds", default=3, show_default=True, help="First loads run; the median is reported.")
@click.option(
    "--table-rows-rounds", default=3, show_default=True, help="Rounds of --table-rows; the median round is reported."
)
@click.option(
    "--trickle-seconds", default=60.0, show_default=True, help="Trickle time per phase: inserts, updates (0: skip)."
)
@click.option("--trickle-trigger", type=float, default=None, help="Trigger of the trickle's job (default: the job's).")
@click.option(
    "--table-rows",
    default=None,
    help="Instead: table sizes, comma list (e.g. 250000,10000000); per size a Delta table is filled directly, then "
    "100k-record batches on random keys are applied to it (--batches of them), and the ratio largest / smallest "
    "is reported.",
)
@click.pass_context
def bench_apply(ctx: click.Context, batch_sizes: str, batches: int, targets: str, warmup_batches: int,
                first_load_rows: int, first_load_rounds: int, table_rows_rounds: int, trickle_seconds: float,
                trickle_trigger: float | None, table_rows: str | None) -> None:  # fmt: skip
    """The apply job: records/s into Delta and PostgreSQL per batch size (Delta also against a floor: decode and
    rewrite only), the first load of an empty Delta target against a plain decode-and-append job, the apply
    job's freshness, and end-to-end freshness at a trickle with the whole stack. An empty --batch-sizes skips
    the throughput runs; with --table-rows, records/s per Delta table size instead."""
    from cdcbridge.harness.bench.apply import run_apply_bench, run_table_rows_bench

    if table_rows is not None:
        sizes = tuple(int(size) for size in table_rows.split(","))
        figures = run_table_rows_bench(
            table_rows=sizes, batches=batches, rounds=table_rows_rounds, warmup_batches=warmup_batches
        )
        _report(ctx, "apply-table-rows", figures)
        return
    sizes = tuple(int(s) for s in batch_sizes.split(",") if s)
    figures = run_apply_bench(batch_sizes=sizes, batches=batches,
                              targets=tuple(targets.split(",")), warmup_batches=warmup_batches,
                              first_load_rows=first_load_rows, first_load_rounds=first_load_rounds,
                              trickle_seconds=trickle_seconds,
                              trickle_trigger=trickle_trigger)  # fmt: skip
    flat = {k: v for k, v in figures.items() if not isinstance(v, dict | list)}
    if sizes:
        _report(ctx, "apply", flat)
        return
    # without the throughput runs, the first load and the trickle are stored apart, so that neither replaces a full
    # run's figures
    first_load = {k: v for k, v in flat.items() if not k.startswith(("delta_trickle", "delta_freshness."))}
    if first_load_rows:
        _report(ctx, "apply-first-load", first_load)
    if trickle_seconds:
        _report(ctx, "apply-trickle", {k: v for k, v in flat.items() if not k.startswith("delta_first_load.")})


@bench.command("bridge")
@click.option("--records", default=500_000, show_default=True, help="Changes pre-filled in the emulator.")
@click.option(
    "--formats", type=click.Choice(["MUTATE_LOG", "RECORD_IMAGE+MUTATE_LOG"]), default="MUTATE_LOG", show_default=True
)
@click.option("--partitions", default=6, show_default=True)
@click.option("--masked", is_flag=True, help="Exclude one column, hash two and redact one (source.tables[].columns).")
@click.pass_context
def bench_bridge(ctx: click.Context, records: int, formats: str, partitions: int, masked: bool) -> None:
    """One worker, emulator → Kafka (Avro, acks=all), against raw produce of the same messages (the ceiling)."""
    from cdcbridge.harness.bench.bridge import MASKED_COLUMNS, run_bridge_bench

    figures = run_bridge_bench(
        records=records, formats=tuple(formats.split("+")), partitions=partitions,
        columns=MASKED_COLUMNS if masked else None,
    )  # fmt: skip
    name = "bridge" if formats == "MUTATE_LOG" else "bridge-both-formats"
    name += "-masked" if masked else ""
    _report(ctx, name, {k: v for k, v in figures.items() if not isinstance(v, dict | list)})


@bench.command("report")
@click.option("--output", type=click.Path(path_type=Path), default=Path("BENCHMARKS.md"), show_default=True)
@click.pass_context
def bench_report(ctx: click.Context, output: Path) -> None:
    """Regenerate BENCHMARKS.md from the results file and the goals file next to it (goals.toml)."""
    from cdcbridge.harness.bench.results import render_markdown

    output.write_text(render_markdown(ctx.obj["results"]) + "\n")
    click.echo(f"wrote {output}")


@cli.command("apply")
@_config_option
@click.option("--once", is_flag=True, help="Apply what the topics hold now, then exit (availableNow trigger).")
def apply(config_path: Path, once: bool) -> None:
    """Run the Spark apply job: Kafka topics → dedup + ordered apply → the configured target.

    Launched as is, the job starts Spark from apply.spark, with the checkout's connector jars (fetched by Maven
    when missing; the S3A jars too when a path is on s3a://) and an installed JDK for what it leaves unset; under
    spark-submit it takes the Spark it was given."""
    from cdcbridge.apply.job import run_apply
    from cdcbridge.apply.spark.session import under_launched_spark

    config = _load_config(config_path)
    if not under_launched_spark():
        from cdcbridge.harness.stack.spark import apply_paths, local_spark_settings

        config = config.with_spark(local_spark_settings(config.apply.spark, paths=apply_paths(config)))
    summary = run_apply(config, once=once, stop_event=None if once else _stop_on_sigterm())
    for line in summary.lines():
        click.echo(line)


@cli.command("chaos")
@click.option("--cycles", default=60, show_default=True, help="Fault cycles (12 kinds: 60 = 5 of each).")
@click.option("--duration", type=float, default=None, help="Stop injecting faults after this many seconds.")
@click.option("--workers", default=2, show_default=True, help="Bridge worker processes.")
@click.option("--seed", default=1, show_default=True, help="Seeds the fault plan, every injector and the load.")
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("chaos-report.json"),
    show_default=True,
    help="JSON report (+ .txt summary beside it).",
)
@click.option("--rate", default=40.0, show_default=True, help="Source writes per second.")
@click.option("--rows", default=200, show_default=True, help="Distinct source rows the load touches.")
@click.option("--kinds", default=None, help="Comma-separated fault kinds (default: all).")
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep worker logs, stack state and the Delta table here.",
)
@click.option("--keep", is_flag=True, help="Leave the services running.")
def chaos(
    cycles: int, duration: float | None, workers: int, seed: int, report_path: Path, rate: float, rows: int,
    kinds: str | None, work_dir: Path | None, keep: bool,
) -> None:  # fmt: skip
    """Soak run under a seeded fault schedule, then check both topics: nothing lost, per-key order, target and last
    images equal the source."""
    from cdcbridge.harness.chaos.run import run_chaos
    from cdcbridge.harness.chaos.schedule import ALL_KINDS, FaultKind
    from cdcbridge.observability.logs import configure_logging

    configure_logging(level="WARNING")
    chosen = tuple(FaultKind(k.strip()) for k in kinds.split(",") if k.strip()) if kinds else ALL_KINDS
    report = run_chaos(cycles, duration, workers, seed, report_path, rate=rate, rows=rows, kinds=chosen,
                       work_dir=work_dir, keep=keep, echo=click.echo, interruptible=True)  # fmt: skip
    click.echo("")
    for line in report.lines():
        click.echo(line)
    if not report.passed:
        raise click.ClickException("; ".join(report.failures()))


@cli.command("traffic")
@_config_option
@click.option("--table", "table_name", default=None, help="Table to write to (default: the first of source.tables).")
@click.option("--rate", default=20.0, show_default=True, help="Changes per second.")
@click.option("--rows", default=500, show_default=True, help="Distinct keys the changes touch.")
@click.option("--operations", type=int, default=None, help="Stop after this many changes (default: run until stopped).")
@click.option(
    "--split-every", default=0.0, show_default=True, metavar="SECONDS",
    help="On the emulator: split a shard of the table's stream this often (0: never), up to --max-shards.",
)  # fmt: skip
@click.option("--max-shards", default=8, show_default=True)
@click.option("--seed", default=1, show_default=True)
def traffic(config_path: Path, table_name: str | None, rate: float, rows: int, operations: int | None,
            split_every: float, max_shards: int, seed: int) -> None:  # fmt: skip
    """Write demo changes to a source table continuously (puts, updates, increments, deletes, batches; shard
    splits on the emulator), keyed by the table's own primary key. A demonstration tool (docker compose's
    `traffic` profile)."""
    from cdcbridge.harness.emulator_admin import EmulatorAdmin
    from cdcbridge.harness.traffic import TrafficWriter
    from cdcbridge.publish.tables import source_client
    from cdcbridge.tablestore.client import StreamClient

    config = _load_config(config_path)
    table_name = table_name or config.source.tables[0].name
    writer = TrafficWriter(
        StreamClient(source_client(config)), table_name, rows=rows, rate=rate, seed=seed,
        admin=EmulatorAdmin(config.source.endpoint) if split_every > 0 else None, split_every=split_every,
        max_shards=max_shards,
    )  # fmt: skip
    click.echo(writer.run(_stop_on_sigterm(), operations).line())


@cli.command("demo")
@click.option("--rows", default=300, show_default=True, help="Distinct source rows the traffic touches.")
@click.option("--operations", default=3000, show_default=True, help="Source operations to write.")
@click.option("--keep", is_flag=True, help="Leave the services running and the work folder in place.")
def demo(rows: int, operations: int, keep: bool) -> None:
    """The whole flow on the embedded default: emulator → two bridge workers → Kafka → Spark → Delta, checked."""
    from cdcbridge.harness.demo import run_demo
    from cdcbridge.observability.logs import configure_logging

    configure_logging(level="WARNING")
    summary = run_demo(rows=rows, operations=operations, keep=keep)
    click.echo("")
    for line in summary.lines():
        click.echo(line)
    if not summary.check_passed:
        raise click.ClickException("the target does not equal the source (see the mismatches above)")


def main() -> None:
    """Entry point: click parses; our own errors become one line on stderr and exit code 1."""
    debug = "--debug" in sys.argv[1:] or os.environ.get("CDCBRIDGE_DEBUG")
    from cdcbridge.observability.logs import quiet_noisy_loggers
    from cdcbridge.observability.redaction import redact

    quiet_noisy_loggers()  # until a command configures logging: the SDKs' own error lines repeat our error
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:
        if debug:  # the traceback too goes through redaction: frames may show a secret in an argument's repr
            click.echo(redact(traceback.format_exc()), err=True)
            sys.exit(1)
        click.echo(f"error: {redact(_error_line(error))}", err=True)
        sys.exit(1)
