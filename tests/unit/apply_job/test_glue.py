"""The small Spark-free pieces around the core: routing, Kafka source options, writer-schema classification,
envelope and tombstone conversion, problems of undecodable values, and the targets' value encodings."""

from __future__ import annotations

import json
import math

import pytest

from cdcbridge.apply.core.model import ColumnValue, TargetRow
from cdcbridge.apply.core.operations import decode_message
from cdcbridge.apply.driver.kafka_records import KafkaRecord, envelope, tombstone, union_value
from cdcbridge.apply.errors import ApplyJobError, UndecodableMessageError
from cdcbridge.apply.kafka_source import kafka_source_options
from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.spark.decode import problem_of
from cdcbridge.apply.targets.delta import _row_from_json, _row_record, _TableShape
from cdcbridge.apply.targets.postgres import decode_attrs, encode_attrs
from cdcbridge.apply.writer_schemas import WriterSchema, classify
from cdcbridge.config import parse_config
from cdcbridge.contract import MessageFormat
from cdcbridge.formats import BridgeTableFormat, schema_text
from cdcbridge.harness.bench.apply_workload import bridge_messages, generate_records

from .compact import kafka_records


def config(**apply):
    return parse_config(
        {
            "source": {
                "tables": [
                    {"name": "a", "formats": ["MUTATE_LOG"]},
                    {"name": "b", "formats": ["RECORD_IMAGE", "MUTATE_LOG"]},
                    {"name": "c", "formats": ["RECORD_IMAGE"], "image_topic": "custom-c"},
                ]
            },
            "kafka": {
                "bootstrap_servers": "k:9092",
                "topic_prefix": "p",
                "security": {
                    "protocol": "SASL_SSL",
                    "sasl_mechanism": "SCRAM-SHA-512",
                    "sasl_username": "u",
                    "sasl_password": 'p"w',
                    "ssl_ca_location": "/ca.pem",
                },
            },
            "apply": apply,
        },
        environ={},
    )


def test_routing_applies_one_format_per_table() -> None:
    routing = TopicRouting.from_config(config())
    assert routing.subscribed_topics() == ["custom-c", "p.a.mutation", "p.b.mutation"]
    image_first = TopicRouting.from_config(config(prefer_format="RECORD_IMAGE"))
    assert image_first.subscribed_topics() == ["custom-c", "p.a.mutation", "p.b.image"]
    assert routing.route("custom-c").table == "c"
    assert routing.is_applied("b", MessageFormat.MUTATE_LOG) and not routing.is_applied("b", MessageFormat.RECORD_IMAGE)


def test_kafka_source_options_map_security_to_the_java_client() -> None:
    options = kafka_source_options(config(max_offsets_per_trigger=500, kafka_options={"sasl.kerberos.x": "1"}),
                                   TopicRouting.from_config(config()))  # fmt: skip
    assert options["subscribe"] == "custom-c,p.a.mutation,p.b.mutation"
    assert options["maxOffsetsPerTrigger"] == "500" and options["includeHeaders"] == "true"
    assert options["failOnDataLoss"] == "true" and options["startingOffsets"] == "earliest"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p\\"w";'
    )
    assert options["kafka.ssl.truststore.type"] == "PEM" and options["kafka.ssl.truststore.location"] == "/ca.pem"
    assert options["kafka.sasl.kerberos.x"] == "1"
    pattern = kafka_source_options(
        config(topic_pattern="p\\..*"), TopicRouting.from_config(config(topic_pattern="p\\..*"))
    )
    assert pattern["subscribePattern"] == "p\\..*" and "subscribe" not in pattern


def test_kafka_source_fetches_large_batches_unless_the_configuration_says_otherwise() -> None:
    options = kafka_source_options(config(), TopicRouting.from_config(config()))
    assert options["kafka.max.poll.records"] == "10000"
    assert options["kafka.max.partition.fetch.bytes"] == str(8 * 1024 * 1024)
    tuned = config(kafka_options={"max.poll.records": "200", "kafka.max.partition.fetch.bytes": "65536"})
    overridden = kafka_source_options(tuned, TopicRouting.from_config(tuned))
    assert overridden["kafka.max.poll.records"] == "200"
    assert overridden["kafka.max.partition.fetch.bytes"] == "65536"


def test_the_driver_reads_with_the_bridges_kafka_settings_unless_java_only_options_are_set() -> None:
    from cdcbridge.apply.kafka_source import driver_consumer_config

    kafka = {"bootstrap_servers": "k:9093", "security": {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
             "sasl_username": "u", "sasl_password": "p"}}  # fmt: skip

    def settings(options: dict[str, str]) -> dict[str, str] | None:
        data = {"source": {"tables": [{"name": "a"}]}, "kafka": kafka,
                "apply": {"app_id": "job", "kafka_options": options}}  # fmt: skip
        return driver_consumer_config(parse_config(data, environ={}))

    plain = settings({"max.poll.records": "100", "kafka.max.partition.fetch.bytes": "1"})
    assert plain is not None and plain["bootstrap.servers"] == "k:9093" and plain["sasl.password"] == "p"
    assert plain["security.protocol"] == "SASL_SSL" and plain["group.id"] == "job-driver"
    assert "max.poll.records" not in plain and "isolation.level" not in plain
    assert settings({"isolation.level": "read_committed"})["isolation.level"] == "read_committed"
    assert settings({"ssl.keystore.location": "/k.jks"}) is None
    assert settings({"kafka.sasl.jaas.config": "x"}) is None


def test_a_client_certificate_in_two_files_is_refused_with_the_fix() -> None:
    bad = config().model_copy(deep=True)
    security = bad.kafka.security.model_copy(update={"ssl_certificate_location": "/c", "ssl_key_location": "/k"})
    bad = bad.model_copy(update={"kafka": bad.kafka.model_copy(update={"security": security})})
    with pytest.raises(ApplyJobError, match="one PEM keystore file"):
        kafka_source_options(bad, TopicRouting.from_config(bad))


def test_writer_schemas_are_classified_by_envelope_name() -> None:
    assert classify(1, schema_text(MessageFormat.MUTATE_LOG)).message_format is MessageFormat.MUTATE_LOG
    assert classify(2, schema_text(MessageFormat.RECORD_IMAGE)).message_format is MessageFormat.RECORD_IMAGE
    foreign = classify(3, json.dumps({"type": "record", "name": "Order", "fields": []}))
    assert foreign.message_format is None and "'Order', not a cdcbridge envelope" in foreign.problem


def test_problems_of_undecodable_values_say_what_is_wrong() -> None:
    good = WriterSchema(4, "{}", MessageFormat.MUTATE_LOG)
    assert "shorter than the Confluent wire-format header" in problem_of(3, None, None, None)
    assert "magic byte 1 is not 0" in problem_of(20, 1, None, None)
    assert "unknown to the registry" in problem_of(
        20, 0, WriterSchema(9, None, None, "schema id 9 is unknown to the registry"), 9
    )
    assert "does not decode as Avro with writer schema id 4" in problem_of(20, 0, good, 4)


def test_compact_json_becomes_the_same_operation_as_the_bridge_envelope() -> None:
    recs = generate_records("users", keys=5, records=80, seed=2)
    for fmt in ("MUTATE_LOG", "RECORD_IMAGE"):
        messages, _ = bridge_messages(recs, BridgeTableFormat(formats=(fmt,)), topic_prefix="p")
        for message, record in zip(messages, kafka_records(messages), strict=True):
            if message.value is None:
                continue
            expected = decode_message(message.value)
            actual = decode_message(envelope(record), message_format=record.message_format)
            assert (actual.table, actual.pk, actual.seq_key, actual.cells, dict(actual.columns)) == (
                expected.table, expected.pk, expected.seq_key, expected.cells, dict(expected.columns))  # fmt: skip
            assert actual.location.offset == record.offset


def test_union_values_and_broken_bodies() -> None:
    assert union_value({"b": "AAE="}) == b"\x00\x01"
    assert math.isnan(union_value({"d": "NaN"})) and union_value({"d": 2.5}) == 2.5 and union_value(None) is None
    broken = KafkaRecord("t", 1, 2, None, body='{"pk": 5}', message_format=MessageFormat.MUTATE_LOG)
    with pytest.raises(UndecodableMessageError, match="partition 1 offset 2"):
        envelope(broken)


def test_a_tombstone_key_must_match_the_tables_primary_key() -> None:
    record = KafkaRecord("t", 0, 7, b'["r1",5]', tombstone=True, seq_key_header="0" * 46)
    message = tombstone(record, "users", ("region", "id"))
    assert message["pk"] == [{"name": "region", "value": "r1"}, {"name": "id", "value": 5}]
    assert message["seq"] == {"seq_key": "0" * 46}
    with pytest.raises(UndecodableMessageError, match="holds 2 primary-key values but table 'users' has 1"):
        tombstone(record, "users", ("id",))
    with pytest.raises(UndecodableMessageError, match="key does not decode"):
        tombstone(KafkaRecord("t", 0, 8, b"[1, 2]", tombstone=True), "users", ("a", "b"))


ROW = TargetRow(
    "users",
    (("region", "r"), ("id", 3)),
    {
        "n": ColumnValue("x", 5),
        "f": ColumnValue(3.0, 6),
        "i": ColumnValue(3, None),
        "b": ColumnValue(b"\xff", 7),
        "z": ColumnValue(True, 1),
        "nan": ColumnValue(float("inf"), 2),
    },
    seq="1" * 46,
    deleted=False,
    source_ts=99,
)


def test_postgres_attrs_keep_every_type_apart() -> None:
    attrs, versions = encode_attrs(ROW)
    decoded = decode_attrs(json.loads(attrs), json.loads(versions))
    assert decoded == ROW.columns
    assert type(decoded["f"].value) is float and type(decoded["i"].value) is int


def test_delta_rows_round_trip_through_spark_json() -> None:
    shape = _TableShape({"region": "string", "id": "bigint"},
                        {"n": "string", "f": "double", "i": "bigint", "b": "binary", "z": "boolean", "nan": "double",
                         "gone": "string"})  # fmt: skip
    record = _row_record(ROW)
    as_spark_json = {k: v for k, v in record.items() if k != "b"} | {"b": "/w==", "nan": "Infinity"}
    assert _row_from_json("users", as_spark_json, shape) == ROW
