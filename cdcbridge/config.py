"""The YAML configuration, validated by pydantic: every field has a default where one makes sense, unknown keys
are errors, `${ENV}` references keep secrets out of the file, and errors name the field and the fix.

Environment overrides: `CDCBRIDGE__<SECTION>__<FIELD>=value` (double underscores) replaces one scalar field, e.g.
`CDCBRIDGE__KAFKA__BOOTSTRAP_SERVERS=broker:9092`.
"""

from __future__ import annotations

import difflib
import os
import re
import typing
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from cdcbridge.contract import MessageFormat
from cdcbridge.coordination.settings import CoordinationSettings
from cdcbridge.formats.columns import ColumnPolicy, ColumnSettings
from cdcbridge.formats.table_format import BridgeTableFormat

#: `${NAME}`, `${NAME:-default}` (environment) or `${file:/path}` (a secret file, e.g. a mounted Kubernetes secret).
_ENV_REFERENCE = re.compile(r"\$\{(?:file:(?P<file>[^}]+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?)\}")
ENV_OVERRIDE_PREFIX = "CDCBRIDGE__"


class ConfigError(Exception):
    """The configuration file is missing, unreadable or invalid; the message names the field and the fix."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OnTrimmed(StrEnum):
    """What a shard does when the stream's retention trimmed records it had not read yet."""

    #: Halt the shard at its checkpoint with an error naming the fix (re-export the table, then restart).
    STOP = "stop"
    #: Resume from the oldest retained record; the loss is logged as an ERROR and counted (a metric).
    CONTINUE = "continue"
    #: Request an incremental snapshot of the table (the stream API does not tell a shard's key range), then resume
    #: from the oldest retained record; the workers run the snapshot, so nothing is lost.
    RESNAPSHOT = "resnapshot"


class TableConfig(BridgeTableFormat):
    """One source table: what to publish and into how many partitions (fixed once the topic exists)."""

    name: str = Field(min_length=1, description="Tablestore table name")
    partitions: int = Field(6, ge=1, le=10_000, description="partitions of the table's topics when created")
    #: `resnapshot` by default: the target converges to the source with nothing lost; `continue` would produce the
    #: records after the gap as if nothing were missing, `stop` halts the shard until a person repairs it.
    on_trimmed: OnTrimmed = Field(
        OnTrimmed.RESNAPSHOT, description="on records trimmed before they were read: resnapshot (request an "
        "incremental snapshot of the table and continue), stop (halt the shard) or continue (accept the loss)"
    )  # fmt: skip
    columns: ColumnSettings | None = Field(
        None, description="column selection and masking, applied before anything reaches Kafka (keys below)"
    )


class SourceConfig(_Section):
    endpoint: str = Field("http://127.0.0.1:8900", description="Tablestore endpoint (the emulator by default)")
    instance: str = Field("cdcbridge", min_length=1, description="Tablestore instance name")
    access_key_id: SecretStr = Field(SecretStr("emulator-id"), description="use ${ENV} references, never literals")
    access_key_secret: SecretStr = Field(SecretStr("emulator-secret"), description="use ${ENV} references")
    sts_token: SecretStr | None = Field(None, description="STS security token for temporary credentials")
    region: str | None = Field(None, description="set to sign requests with V4 (e.g. cn-hangzhou)")
    check_crc: bool = Field(True, description="verify PlainBuffer CRCs of stream records")
    #: Off by default: a misspelt or forgotten table should stop a worker at once with the fix, not leave it idle.
    #: On where a set-up job creates the tables beside the workers (docker compose).
    wait_for_tables: bool = Field(
        False,
        description="a worker whose table (or its stream) does not exist yet waits for it, logging once a minute "
        "what to create and how, instead of exiting",
    )
    column_hash_key: SecretStr | None = Field(
        None,
        min_length=16,
        description="HMAC-SHA256 key of columns masked with hash (16+ characters; use ${ENV} or ${file:PATH}): "
        "the same key gives the same masked values, so joins across tables and runs still work",
    )
    tables: tuple[TableConfig, ...] = Field(min_length=1)

    @field_validator("tables")
    @classmethod
    def _unique_tables(cls, tables: tuple[TableConfig, ...]) -> tuple[TableConfig, ...]:
        names = [t.name for t in tables]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"table(s) listed twice: {', '.join(duplicates)}")
        return tables

    @model_validator(mode="after")
    def _hash_key_when_hashing(self) -> SourceConfig:
        hashing = [t.name for t in self.tables if t.columns is not None and t.columns.hashes]
        if hashing and self.column_hash_key is None:
            raise ValueError(
                f"table(s) {', '.join(hashing)} mask columns with hash but column_hash_key is not set; set "
                "source.column_hash_key to ${CDCBRIDGE_COLUMN_HASH_KEY} (or ${file:/path/to/key}) and keep the key "
                "the same for as long as masked values must join"
            )
        return self

    def column_policy(self, name: str) -> ColumnPolicy | None:
        """The column selection and masking of table `name`, or None when it publishes every column as it is."""
        settings = self.table(name).columns
        if settings is None:
            return None
        key = self.column_hash_key.get_secret_value().encode() if self.column_hash_key is not None else None
        return ColumnPolicy(name, settings, key)

    def table(self, name: str) -> TableConfig:
        for table in self.tables:
            if table.name == name:
                return table
        raise ConfigError(f"table {name!r} is not in source.tables; add it there (known: {self.table_names()})")

    def table_names(self) -> list[str]:
        return [t.name for t in self.tables]


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class KafkaSecurity(_Section):
    """Passed through to confluent-kafka (and to Spark's Kafka source as `kafka.`-prefixed options)."""

    protocol: SecurityProtocol = Field(
        SecurityProtocol.PLAINTEXT, description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    sasl_mechanism: str | None = Field(None, description="PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, ...")
    sasl_username: str | None = Field(None, description="SASL user")
    sasl_password: SecretStr | None = Field(None, description="SASL password (use ${ENV})")
    ssl_ca_location: str | None = Field(None, description="CA bundle to verify the brokers")
    ssl_certificate_location: str | None = Field(None, description="client certificate (mutual TLS)")
    ssl_key_location: str | None = Field(None, description="client key (mutual TLS)")
    ssl_key_password: SecretStr | None = Field(None, description="password of the client key")

    def client_config(self) -> dict[str, str]:
        """librdkafka / Java client property names; secrets revealed only here, at the client boundary."""
        config = {"security.protocol": self.protocol.value}
        optional = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password.get_secret_value() if self.sasl_password else None,
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": self.ssl_key_password.get_secret_value() if self.ssl_key_password else None,
        }
        config.update({k: v for k, v in optional.items() if v is not None})
        return config


class RegistryConfig(_Section):
    url: str = Field("http://127.0.0.1:8081/apis/ccompat/v7", description="Confluent-compatible API base URL")
    basic_auth_user_info: SecretStr | None = Field(None, description="user:password for HTTP basic auth")
    ssl_ca_location: str | None = Field(None, description="CA bundle to verify the registry")

    timeout_seconds: float = Field(
        10.0, gt=0, description="per-request timeout of registry calls (a timed-out call is retried)"
    )

    def client_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"url": self.url, "timeout": self.timeout_seconds}
        if self.basic_auth_user_info is not None:
            config["basic.auth.user.info"] = self.basic_auth_user_info.get_secret_value()
        if self.ssl_ca_location:
            config["ssl.ca.location"] = self.ssl_ca_location
        return config


class KafkaConfig(_Section):
    bootstrap_servers: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    topic_prefix: str = Field("cdc", description="topics are <prefix>.<table>.image / .mutation by default")
    replication_factor: int = Field(1, ge=1, description="replication of topics the bridge creates")
    dead_letter_topic: str | None = Field(
        None,
        min_length=1,
        description="where a reference (table, key, seq, size) to a message too large for its topic goes; unset = "
        "the shard stops at that message until the topic's limit is raised",
    )
    partition_check_interval_seconds: float = Field(
        60.0, gt=0, description="how often a running worker re-checks its topics' partition counts"
    )
    producer: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="librdkafka producer overrides (idempotence, acks, partitioner are fixed)"
    )
    security: KafkaSecurity = KafkaSecurity()
    schema_registry: RegistryConfig = RegistryConfig()

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.security.client_config()}


class ApplyTarget(StrEnum):
    DELTA = "delta"
    POSTGRES = "postgres"
    TABLESTORE = "tablestore"


class BadRecordPolicy(StrEnum):
    STOP = "stop"
    DEAD_LETTER = "dead_letter"


#: Master URLs Spark accepts: local (local[N], local[*], local[N,F]), local-cluster[...], standalone, YARN, Kubernetes.
_SPARK_MASTER = re.compile(
    r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[[^\]]+\]|spark://\S+|yarn|k8s://\S+|mesos://\S+"
)
#: Spark settings that have a field of their own, so each is set in one place.
_SPARK_CONF_FIELDS = {"spark.master": "master", "spark.driver.memory": "driver_memory"}


class SparkSettings(_Section):
    """Where the apply job's Spark runs. `cdcbridge apply` launches Spark with these; under spark-submit (or in a
    process that already runs Spark) the master and settings it was given win and only missing keys are added."""

    master: str = Field(
        "local[*]",
        description="Spark master when the job launches Spark itself: local[*] (every core of this machine), "
        "local[N], spark://HOST:PORT, yarn, k8s://URL; not used under spark-submit, which names its own",
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="any Spark setting, passed through (e.g. spark.executor.memory, spark.hadoop.fs.s3a.*); it "
        "replaces the job's defaults, not what spark-submit was given; spark.jars entries are added to jars_dir's",
    )
    jars_dir: Path | None = Field(
        None,
        description="folder of the connector jars (Kafka source, Avro, Delta, JDBC, the apply kernel) given to Spark "
        "as local files; unset: `cdcbridge apply` uses the checkout's .cache/jvm/spark, fetched by Maven if missing",
    )
    java_home: Path | None = Field(
        None,
        description="JDK (17 or 21) Spark runs on; unset: JAVA_HOME, else `cdcbridge apply` finds an installed one",
    )
    driver_memory: str | None = Field(
        None,
        pattern=r"(?i)^\d+([kmgtp]b?|b)?$",
        description="driver heap when the job launches Spark (e.g. 2g); unset: Spark's default (1g)",
    )

    @field_validator("master")
    @classmethod
    def _known_master(cls, value: str) -> str:
        if _SPARK_MASTER.fullmatch(value) is None:
            raise ValueError(
                f"{value!r} is not a Spark master URL; use local[*], local[N], spark://HOST:PORT, yarn or k8s://URL"
            )
        return value

    @field_validator("conf", mode="before")
    @classmethod
    def _settings_as_text(cls, value: Any) -> Any:
        """YAML numbers and booleans become the text Spark reads (``4``, ``true``)."""
        if not isinstance(value, Mapping):
            return value
        return {
            key: str(item).lower() if isinstance(item, bool) else str(item) if isinstance(item, int | float) else item
            for key, item in value.items()
        }

    @field_validator("conf")
    @classmethod
    def _spark_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key in _SPARK_CONF_FIELDS:
                raise ValueError(f"{key} has a setting of its own: set apply.spark.{_SPARK_CONF_FIELDS[key]}")
            if not key.startswith("spark."):
                raise ValueError(f"{key!r} is not a Spark setting (they start with 'spark.'; Hadoop's: spark.hadoop.)")
        return value


class ApplyConfig(_Section):
    target: ApplyTarget = Field(ApplyTarget.DELTA, description="delta, postgres or tablestore")
    delta_path: str = Field("./data/delta", description="root folder of the Delta tables (one per source table)")
    postgres_dsn: SecretStr | None = Field(None, description="libpq connection string for the postgres target")
    postgres_schema: str = Field(
        "public", min_length=1, description="PostgreSQL schema of the target tables, progress and dead-letter tables"
    )
    tablestore_endpoint: str | None = Field(
        None, description="endpoint of the Tablestore target instance (default: source.endpoint)"
    )
    tablestore_instance: str | None = Field(None, description="Tablestore target instance (default: source.instance)")
    tablestore_access_key_id: SecretStr | None = Field(None, description="default: source.access_key_id")
    tablestore_access_key_secret: SecretStr | None = Field(None, description="default: source.access_key_secret")
    tablestore_table_prefix: str = Field(
        "", description="target table of source table T is <prefix>T (created with T's primary key when missing)"
    )
    checkpoint_location: str = Field("./data/apply-checkpoint", description="Spark streaming checkpoint folder")
    app_id: str = Field("cdcbridge-apply", description="id of this apply job in batch markers")
    #: 1 s: a small batch takes about a second of fixed cost, so a longer interval only adds its half to every row's
    #: wait; an idle trigger costs a Kafka offset lookup, no batch (benchmarks/history.md, 2026-11-25).
    trigger_seconds: float = Field(
        1.0, gt=0, description="micro-batch interval of the streaming query (a busy job runs batches back to back)"
    )
    max_offsets_per_trigger: int = Field(100_000, gt=0, description="messages per micro-batch at most")
    #: Measured: benchmarks/history.md, 2026-11-25 (trickle).
    small_batch_max_messages: int = Field(
        1000,
        ge=0,
        description="a micro-batch of at most this many messages is applied on the driver (its offsets read from "
        "Kafka by the driver itself, a read of its stored rows, one write) instead of as several Spark jobs (0: never)",
    )
    starting_offsets: str = Field("earliest", pattern=r"^(earliest|latest)$", description="where a new job starts")
    #: Off by default, like source.wait_for_tables: a job whose topics never appear should say so at once.
    wait_for_topics: bool = Field(
        False,
        description="wait until the configured tables' topics exist (a bridge worker creates them), logging once a "
        "minute what is missing, before starting the Spark query",
    )
    fail_on_data_loss: bool = Field(True, description="stop when Kafka lost messages the job had not read")
    on_bad_record: BadRecordPolicy = Field(BadRecordPolicy.STOP, description="stop, or dead_letter")
    dead_letter_table: str = Field(
        "_dead_letters",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="where bad records go with on_bad_record=dead_letter (a Delta table under delta_path, a "
        "PostgreSQL table in postgres_schema, or a Tablestore table with the table prefix)",
    )
    prefer_format: MessageFormat = Field(
        MessageFormat.MUTATE_LOG,
        description="for a table published in both formats, the topic applied (MUTATE_LOG: every operation; "
        "RECORD_IMAGE: the latest image per row); a target row is fed from one format only",
    )
    topic_pattern: str | None = Field(
        None,
        description="Java regex of topics to read (Kafka subscribePattern) instead of the configured tables' "
        "topics; messages of tables not in source.tables are bad records",
    )
    kafka_options: dict[str, str] = Field(
        default_factory=dict,
        description="extra Kafka client properties for the Spark source, e.g. sasl.jaas.config or "
        "ssl.keystore.location (without the 'kafka.' prefix); max.poll.records defaults to 10000 and "
        "max.partition.fetch.bytes to 8 MiB. Any key but these two and isolation.level makes small batches read "
        "by a Spark job instead of the driver, whose client (librdkafka) takes kafka.security",
    )
    purge_deleted_after_hours: float | None = Field(
        None,
        gt=0,
        description="remove soft-deleted rows whose delete is older than this; at least the topics' retention "
        "plus the longest replay (None: keep them)",
    )
    purge_interval_seconds: float = Field(3600.0, gt=0, description="how often the purge runs while the job runs")
    spark: SparkSettings = SparkSettings()


class ObservabilityConfig(_Section):
    metrics_port: int | None = Field(None, ge=0, le=65535, description="Prometheus endpoint port (None: off)")
    metrics_host: str = Field("127.0.0.1", description="address of the metrics endpoint")
    log_format: str = Field("text", pattern=r"^(text|json)$", description="text or json")
    log_level: str = Field("INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR)$", description="DEBUG, INFO, WARNING, ERROR")
    retention_warning_share: float = Field(
        0.5, gt=0, lt=1, description="WARNING when a shard's oldest unread record is older than this share of the "
        "stream's expiration"
    )  # fmt: skip
    retention_error_share: float = Field(
        0.8, gt=0, lt=1, description="ERROR past this share (records are trimmed, i.e. lost, at 1.0)"
    )
    retention_log_repeat_seconds: float = Field(
        600.0, gt=0, description="while a shard stays past a threshold, its log line is repeated this often"
    )

    @model_validator(mode="after")
    def _warning_before_error(self) -> ObservabilityConfig:
        if self.retention_warning_share >= self.retention_error_share:
            raise ValueError(
                f"observability.retention_warning_share ({self.retention_warning_share}) must be below "
                f"retention_error_share ({self.retention_error_share})"
            )
        return self


def _require_timezone(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError(
            f"{value.isoformat()} has no timezone; write it as ISO 8601 with one, e.g. 2025-06-01T12:00:00Z "
            "or 2025-06-01T20:00:00+08:00"
        )
    return value


def parse_end_time(text: str) -> datetime:
    """An end time given on the command line (`cdcbridge run --end-time`): ISO 8601 with a timezone."""
    try:
        return _require_timezone(datetime.fromisoformat(text.strip()))  # type: ignore[return-value]
    except ValueError as error:
        raise ConfigError(f"--end-time {text!r}: {error}") from None


class BridgeSettings(_Section):
    """How `cdcbridge run` workers end (by default they run until stopped)."""

    end_time: datetime | None = Field(
        None,
        description="replicate the changes committed up to this time (ISO 8601 with a timezone), then exit 0 once "
        "every shard of every table passed it; a later run without it continues from there",
    )
    end_time_grace_seconds: float = Field(
        10.0, ge=0, description="a shard with nothing new to read counts as past end_time this long after it"
    )
    end_time_check_interval_seconds: float = Field(
        5.0, gt=0, description="how often a worker checks (and logs) whether every shard passed end_time"
    )

    @field_validator("end_time")
    @classmethod
    def _timezone_required(cls, value: datetime | None) -> datetime | None:
        return _require_timezone(value)


class IncrementalSnapshotSettings(_Section):
    """`cdcbridge snapshot --table T`: re-snapshot a table or key range chunk by chunk while the workers stream."""

    chunk_rows: int = Field(1000, ge=1, le=5000, description="rows per chunk (one GetRange window and fence)")
    rows_per_second: float | None = Field(
        None, gt=0, description="rows read per second by an incremental snapshot unless its request sets a rate "
        "(None: unlimited)"
    )  # fmt: skip
    clock_skew_margin_seconds: float = Field(
        1.0, ge=0, description="how far this host's clock may be off Tablestore's commit times and the workers' "
        "clocks; a chunk's window starts this long before its read and its fence ends this long after"
    )  # fmt: skip
    fence_refresh_seconds: float = Field(
        1.0, gt=0, description="the longest a worker goes without re-reading the open chunks of its tables"
    )
    exporter_timeout_seconds: float = Field(
        15.0, gt=0, description="a snapshot exporter whose heartbeat has not changed for this long is dead: workers "
        "stop holding records for its chunk and another exporter may take the snapshot over"
    )  # fmt: skip
    max_key_retries: int = Field(
        5, ge=0, description="how often a key that changed while its chunk was open is re-read alone before it is "
        "listed as skipped (hot) in the snapshot's status"
    )  # fmt: skip
    run_in_workers: bool = Field(
        True, description="bridge workers run the requested snapshots of their tables (signal rows, trims) and take "
        "over those whose exporter died; false when you run exporters yourself (`cdcbridge snapshot run-pending`)"
    )  # fmt: skip
    worker_poll_seconds: float = Field(
        5.0, gt=0, description="how often a worker looks for requested snapshots and dead exporters (run_in_workers)"
    )

    @model_validator(mode="after")
    def _timeout_beyond_refresh(self) -> IncrementalSnapshotSettings:
        least = self.fence_refresh_seconds + 2 * self.clock_skew_margin_seconds
        if self.exporter_timeout_seconds <= least:
            raise ValueError(
                f"snapshot.incremental.exporter_timeout_seconds ({self.exporter_timeout_seconds}) must exceed "
                f"fence_refresh_seconds + 2 * clock_skew_margin_seconds ({least}), or a live exporter could be judged "
                "dead"
            )
        return self


class SnapshotConfig(_Section):
    """`cdcbridge snapshot`: export the existing rows, then the bridge streams from a start taken before."""

    parallelism: int = Field(4, ge=1, le=64, description="key ranges exported at the same time (one thread each)")
    page_rows: int = Field(1000, ge=1, le=5000, description="rows per GetRange page")
    split_size_bytes: int = Field(
        100 * 1024 * 1024, ge=1, description="about how much row data one key range holds (ComputeSplitPointsBySize)"
    )
    clock_skew_margin_seconds: float = Field(
        5.0,
        ge=0,
        description="the stream start is taken this long before the export begins, so clock differences between "
        "this host and Tablestore cannot open a gap (a longer overlap is harmless)",
    )
    wait_poll_seconds: float = Field(
        5.0, gt=0, description="how often a starting worker re-checks a table whose snapshot is still running"
    )
    incremental: IncrementalSnapshotSettings = IncrementalSnapshotSettings()


class BridgeConfig(_Section):
    source: SourceConfig
    coordination: CoordinationSettings = CoordinationSettings()
    kafka: KafkaConfig = KafkaConfig()
    apply: ApplyConfig = ApplyConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    bridge: BridgeSettings = BridgeSettings()
    snapshot: SnapshotConfig = SnapshotConfig()

    def with_end_time(self, end_time: datetime) -> BridgeConfig:
        """This configuration with `bridge.end_time` replaced (`cdcbridge run --end-time`)."""
        _require_timezone(end_time)
        return self.model_copy(update={"bridge": self.bridge.model_copy(update={"end_time": end_time})})

    def with_spark(self, spark: SparkSettings) -> BridgeConfig:
        """This configuration with `apply.spark` replaced (the CLI fills in the local Spark environment)."""
        return self.model_copy(update={"apply": self.apply.model_copy(update={"spark": spark})})

    @model_validator(mode="after")
    def _topics_are_distinct(self) -> BridgeConfig:
        seen: dict[str, str] = {}
        for table in self.source.tables:
            for topic in table.topics(prefix=self.kafka.topic_prefix, table=table.name).values():
                if topic in seen:
                    raise ValueError(f"topic {topic} is used by both table {seen[topic]} and table {table.name}")
                seen[topic] = table.name
        return self


def _substitute_env(node: Any, path: str, environ: Mapping[str, str]) -> Any:
    """Replace `${NAME}` / `${NAME:-default}` / `${file:PATH}` in every string; a missing variable or unreadable
    file names the field."""
    if isinstance(node, dict):
        return {
            key: _substitute_env(value, f"{path}.{key}" if path else str(key), environ) for key, value in node.items()
        }
    if isinstance(node, list):
        return [_substitute_env(value, f"{path}[{i}]", environ) for i, value in enumerate(node)]
    if not isinstance(node, str):
        return node

    def replace(match: re.Match[str]) -> str:
        secret_file = match.group("file")
        if secret_file is not None:
            try:
                return Path(secret_file).expanduser().read_text().rstrip("\r\n")
            except OSError as error:
                raise ConfigError(
                    f"{path}: cannot read secret file {secret_file}: {error.strerror}; create it or fix the path"
                ) from None
        name, default = match.group("name"), match.group("default")
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise ConfigError(f"{path}: environment variable {name} is not set; export it or remove the reference")

    return _ENV_REFERENCE.sub(replace, node)


def _apply_env_overrides(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    for variable, value in environ.items():
        if not variable.startswith(ENV_OVERRIDE_PREFIX):
            continue
        keys = [part.lower() for part in variable[len(ENV_OVERRIDE_PREFIX) :].split("__") if part]
        if not keys:
            continue
        node = data
        for key in keys[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{variable} overrides {'.'.join(keys)}, but {key} is not a section")
            node = child
        node[keys[-1]] = value
    return data


def _format_validation_error(error: ValidationError, origin: str) -> str:
    """One problem per thing the user wrote wrong, without knock-on errors: a container's own error (`source.tables`
    "at least 1 item") is dropped when an error inside it explains it, since pydantic counts a broken item as missing,
    and so is a missing key whose misspelling is reported beside it."""
    items = error.errors()
    locations = [tuple(item["loc"]) for item in items]
    suggestions = {
        location: _closest_key(location) for item, location in zip(items, locations, strict=True)
        if item["type"] == "extra_forbidden"
    }  # fmt: skip
    misspelt = {(*location[:-1], key) for location, key in suggestions.items() if key}
    problems = []
    for item, location in zip(items, locations, strict=True):
        if any(len(other) > len(location) and other[: len(location)] == location for other in locations):
            continue
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            key = suggestions[location]
            message = f"unknown key; did you mean {key!r}?" if key else _UNKNOWN_KEY
        elif item["type"] == "missing":
            if location in misspelt:
                continue
            message = "required field is missing"
        problems.append(f"{'.'.join(str(part) for part in location) or '(top level)'}: {message}")
    return f"invalid configuration in {origin}: " + "; ".join(problems)


_UNKNOWN_KEY = "unknown key; check the spelling against the configuration reference in README.md"


def _closest_key(location: tuple[str | int, ...]) -> str | None:
    """The known key of the section that an unknown key most likely misspells, if one is close enough."""
    section = _section_model(location[:-1])
    known = list(section.model_fields) if section is not None else []
    close = difflib.get_close_matches(str(location[-1]), known, n=1, cutoff=0.75)
    return close[0] if close else None


def _section_model(location: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model that validates the mapping at `location` (list indexes skipped), or None if there is none."""
    model: type[BaseModel] = BridgeConfig
    for part in location:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model


def parse_config(
    data: Mapping[str, Any], *, origin: str = "<config>", environ: Mapping[str, str] | None = None
) -> BridgeConfig:
    """Validate an already-loaded mapping (after env substitution and overrides)."""
    environ = os.environ if environ is None else environ
    if not isinstance(data, Mapping):
        raise ConfigError(f"{origin}: the top level must be a mapping with source/coordination/kafka/apply sections")
    resolved = _apply_env_overrides(_substitute_env(dict(data), "", environ), environ)
    try:
        return BridgeConfig.model_validate(resolved)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error, origin)) from None


def load_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> BridgeConfig:
    """Read and validate a YAML configuration file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read configuration file {path}: {error.strerror}; pass --config FILE") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        # No snippet of the file: the offending line may hold a literal secret.
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "syntax error"
        raise ConfigError(f"{path} is not valid YAML{where}: {problem}; fix the syntax there") from None
    return parse_config(data, origin=str(path), environ=environ)


def reference_markdown() -> str:
    """The configuration reference table for README.md, generated from the models (a test keeps them in sync)."""
    from pydantic.fields import FieldInfo

    rows = ["| key | default | description |", "|---|---|---|"]

    def describe(model: type[BaseModel], prefix: str) -> None:
        for name, info in model.model_fields.items():
            key = f"{prefix}{name}"
            annotation = info.annotation
            candidates = [annotation, *typing.get_args(annotation)]  # a section may be optional (`X | None`)
            nested = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
            if name == "tables":
                rows.append(f"| `{key}` | (required) | list of tables; each entry has the keys below |")
                describe(TableConfig, f"{key}[].")
                continue
            if nested is not None:
                describe(nested, f"{key}.")
                continue
            rows.append(f"| `{key}` | {_default_text(info)} | {(info.description or '').replace('|', '/')} |")

    def _default_text(info: FieldInfo) -> str:
        if info.is_required():
            return "(required)"
        default = info.get_default(call_default_factory=True)
        if isinstance(default, SecretStr):
            return "(secret)"
        if isinstance(default, StrEnum):
            return f"`{default.value}`"
        if isinstance(default, tuple) and default and isinstance(default[0], StrEnum):
            return "`" + ", ".join(d.value for d in default) + "`"
        return f"`{default}`" if default not in (None, {}, ()) else "-"

    describe(BridgeConfig, "")
    return "\n".join(rows)


def update_readme(path: Path = Path("README.md")) -> None:
    """Rewrite README.md's configuration reference section from the models."""
    start, end = "<!-- config-reference:start -->", "<!-- config-reference:end -->"
    text = path.read_text()
    path.write_text(
        text[: text.index(start) + len(start)] + "\n" + reference_markdown() + "\n" + text[text.index(end) :]
    )


if __name__ == "__main__":
    update_readme()
