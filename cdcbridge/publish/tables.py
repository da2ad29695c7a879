"""The tables a process publishes, set up for `run` and `snapshot` alike: each table's stream (waited for with
`source.wait_for_tables`), its topics (created
with the configured partitions, checked against the counts recorded in the status table), the value schemas in the
registry, and the C encoders bound to the registered schema ids. Broker or registry outages are retried with
backoff and logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from confluent_kafka.schema_registry import SchemaRegistryClient
from tablestore import OTSClient

from cdcbridge.config import BridgeConfig, TableConfig
from cdcbridge.contract import TOPIC_CLEANUP_POLICY, MessageFormat
from cdcbridge.formats import fast_envelopes
from cdcbridge.formats.columns import ColumnPolicyError
from cdcbridge.formats.schemas import schema_text
from cdcbridge.kafka.errors import BrokerUnreachableError, RegistryUnreachableError
from cdcbridge.kafka.schemas import TopicValueSerializers
from cdcbridge.kafka.topics import TopicAdmin, TopicSpec
from cdcbridge.publish.errors import BridgeStartError
from cdcbridge.publish.record_encoder import FastEncoder
from cdcbridge.publish.source_streams import table_stream_id
from cdcbridge.publish.topic_record import TopicPartitionRecord
from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.connection import build_ots_client

log = logging.getLogger(__name__)
T = TypeVar("T")


def retry_until_up(what: str, call: Callable[[], T], stop: threading.Event, *, max_delay: float = 30.0) -> T:
    """Call `call` until it stops raising an *unreachable* error, backing off; other errors propagate."""
    delay = 1.0
    while True:
        try:
            return call()
        except (BrokerUnreachableError, RegistryUnreachableError) as error:
            log.warning("%s: %s; retrying in %.0fs", what, error, delay)
            if stop.wait(delay):
                raise BridgeStartError(f"stopped while waiting for {what}") from error
            delay = min(delay * 2, max_delay)


@dataclass
class TableRuntime:
    table: TableConfig
    stream_id: str
    topics: dict[MessageFormat, str]
    #: Partition count of each topic, as created or recorded at start (a running worker keeps checking it).
    partitions: dict[str, int] = field(default_factory=dict)


def source_client(config: BridgeConfig) -> OTSClient:
    """The SDK client of the source instance, with the stream APIs installed."""
    source = config.source
    return build_ots_client(
        source.endpoint, source.instance, source.access_key_id.get_secret_value(),
        source.access_key_secret.get_secret_value(), region=source.region,
        sts_token=source.sts_token.get_secret_value() if source.sts_token else None,
    )  # fmt: skip


def check_column_settings(config: BridgeConfig, ots: OTSClient, table: str) -> None:
    """Refuse to start when `source.tables[].columns` names a primary-key column of `table` (only Tablestore knows
    the primary key, so this is checked at start, before anything is published)."""
    policy = config.source.column_policy(table)
    if policy is None:
        return
    primary_key = [str(column[0]) for column in ots.describe_table(table).table_meta.schema_of_primary_key]
    try:
        policy.check_primary_key(primary_key)
    except ColumnPolicyError as error:
        raise BridgeStartError(str(error)) from None


def prepare_tables(
    config: BridgeConfig, ots: OTSClient, streams: StreamClient, stop: threading.Event
) -> tuple[list[TableRuntime], TopicValueSerializers]:
    """What producing a table's messages needs, for `run` and `snapshot` alike: every table's stream, its topics
    (created with the configured partitions, checked against the recorded counts) and the registered schemas."""
    source = config.source
    prefix = config.kafka.topic_prefix
    tables = []
    for table in source.tables:
        stream_id = table_stream_id(streams, table, source.instance, wait=source.wait_for_tables, stop=stop)
        check_column_settings(config, ots, table.name)
        tables.append(TableRuntime(table, stream_id, table.topics(prefix=prefix, table=table.name)))

    admin = TopicAdmin(config.kafka.client_config())
    schema_by_topic: dict[str, str] = {}
    for rt in tables:
        record = TopicPartitionRecord(ots, config.coordination.status_table, rt.stream_id)
        specs = [
            TopicSpec(topic, rt.table.partitions, TOPIC_CLEANUP_POLICY[fmt], config.kafka.replication_factor)
            for fmt, topic in rt.topics.items()
        ]
        recorded = record.read(spec.name for spec in specs)
        counts = retry_until_up(
            f"creating topics of table {rt.table.name}", partial(admin.ensure, specs, recorded), stop
        )
        record.record(counts, recorded)
        rt.partitions = {topic: counts[topic] for topic in rt.topics.values() if topic in counts}
        schema_by_topic.update({topic: schema_text(fmt) for fmt, topic in rt.topics.items()})

    registry = SchemaRegistryClient(config.kafka.schema_registry.client_config())
    serializers = TopicValueSerializers(registry, schema_by_topic)
    retry_until_up("registering value schemas", serializers.register_all, stop)
    return tables, serializers


def fast_encoders(
    rt: TableRuntime, serializers: TopicValueSerializers, instance: str
) -> dict[MessageFormat, FastEncoder]:
    """The C encoders of the table's formats, bound to each topic's registered schema id (none without the C module
    or for a topic whose schema is not registered through `serializers`: the builders and the serializer do the
    work)."""
    encoders: dict[MessageFormat, FastEncoder] = {}
    mutation_id = _schema_id(rt, serializers, MessageFormat.MUTATE_LOG)
    if mutation_id is not None:
        encoders[MessageFormat.MUTATE_LOG] = fast_envelopes.FastFormat(MessageFormat.MUTATE_LOG, instance, mutation_id)
    image_id = _schema_id(rt, serializers, MessageFormat.RECORD_IMAGE)
    if image_id is not None:
        encoders[MessageFormat.RECORD_IMAGE] = fast_envelopes.FastFormat(
            MessageFormat.RECORD_IMAGE, instance, image_id, rt.table.tombstones
        )
    return encoders


def encoding_path(formats: tuple[MessageFormat, ...], encoders: Mapping[MessageFormat, FastEncoder]) -> str:
    """One line for the start-up log: how the table's values are encoded, and why not by the C encoder if not (it
    is several times faster, so an operator should see when it is missing)."""
    if all(f in encoders for f in formats):
        return "values encoded by the C encoder (plain records) and the Avro serializer (the rest)"
    reasons = fast_envelopes.DISABLED_REASONS
    why = "; ".join(f"{f}: {reasons.get(f) or 'schema id not registered'}" for f in formats if f not in encoders)
    return f"values encoded by the Avro serializer only, several times slower ({why})"


def _schema_id(rt: TableRuntime, serializers: TopicValueSerializers, message_format: MessageFormat) -> int | None:
    """The registered schema id of the table's topic of `message_format`, when its C encoder can be used."""
    topic = rt.topics.get(message_format)
    if topic is None or not fast_envelopes.fast_path_available(message_format):
        return None
    return serializers.schema_ids.get(topic)
