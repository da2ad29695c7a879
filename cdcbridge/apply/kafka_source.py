"""Options of Spark's Kafka source for the apply job, from the configuration.

The bridge's security settings use librdkafka names; the Spark source runs the Java client, so they are mapped:
SASL user/password become ``sasl.jaas.config``, a PEM CA file becomes a PEM truststore. Anything else (a
keystore, Kerberos) goes through ``apply.kafka_options`` unchanged, with the ``kafka.`` prefix added.

The Java consumer's fetch sizes are raised for large micro-batches (:data:`CONSUMER_DEFAULTS`); ``kafka_options``
overrides them.

A small batch is read by the driver itself with librdkafka (:mod:`.driver.kafka_fetch`), with the settings the
bridge's producer connects with (:func:`driver_consumer_config`).
"""

from __future__ import annotations

from cdcbridge.apply.errors import ApplyJobError
from cdcbridge.apply.routing import TopicRouting
from cdcbridge.config import BridgeConfig, KafkaSecurity

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


#: Consumer settings for reading a micro-batch of up to ``max_offsets_per_trigger`` records: the Java client's
#: defaults (500 records per poll, 1 MiB per partition per fetch) split a large batch into many small fetches.
CONSUMER_DEFAULTS = {"max.poll.records": "10000", "max.partition.fetch.bytes": str(8 * 1024 * 1024)}


#: ``apply.kafka_options`` keys that only tune the Java consumer's fetches: the driver's reader does without them.
_TUNING_KEYS = frozenset(CONSUMER_DEFAULTS)
#: ``apply.kafka_options`` keys librdkafka takes with the same name and meaning.
_SHARED_KEYS = frozenset({"isolation.level"})


def _jaas_quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_security_properties(security: KafkaSecurity) -> dict[str, str]:
    """Java Kafka client properties equivalent to the librdkafka security settings."""
    properties = {"security.protocol": security.protocol.value}
    if security.sasl_mechanism:
        properties["sasl.mechanism"] = security.sasl_mechanism
        if security.sasl_username is not None:
            module = _JAAS_MODULES.get(security.sasl_mechanism.upper())
            if module is None:
                raise ApplyJobError(
                    f"kafka.security.sasl_mechanism {security.sasl_mechanism} has no user/password login module",
                    fix="set apply.kafka_options['sasl.jaas.config'] for the Spark Kafka source",
                )
            password = security.sasl_password.get_secret_value() if security.sasl_password else ""
            properties["sasl.jaas.config"] = (
                f"{module} required username={_jaas_quoted(security.sasl_username)} password={_jaas_quoted(password)};"
            )
    if security.ssl_ca_location:
        properties["ssl.truststore.type"] = "PEM"
        properties["ssl.truststore.location"] = security.ssl_ca_location
    if security.ssl_certificate_location or security.ssl_key_location:
        if security.ssl_certificate_location != security.ssl_key_location:
            raise ApplyJobError(
                "the Java Kafka client reads a client certificate and its key from one PEM keystore file, but "
                "kafka.security.ssl_certificate_location and ssl_key_location differ",
                fix="concatenate key and certificate chain into one PEM file and set both to it, or set "
                "apply.kafka_options ssl.keystore.* yourself",
            )
        properties["ssl.keystore.type"] = "PEM"
        properties["ssl.keystore.location"] = security.ssl_certificate_location or ""
        if security.ssl_key_password is not None:
            properties["ssl.key.password"] = security.ssl_key_password.get_secret_value()
    return properties


def kafka_source_options(config: BridgeConfig, routing: TopicRouting) -> dict[str, str]:
    """Every option of ``spark.readStream.format("kafka")`` for this job."""
    apply = config.apply
    options = {
        "kafka.bootstrap.servers": config.kafka.bootstrap_servers,
        "startingOffsets": apply.starting_offsets,
        "maxOffsetsPerTrigger": str(apply.max_offsets_per_trigger),
        "failOnDataLoss": "true" if apply.fail_on_data_loss else "false",
        "includeHeaders": "true",
    }
    if routing.pattern is not None:
        options["subscribePattern"] = routing.pattern
    else:
        topics = routing.subscribed_topics()
        if not topics:
            raise ApplyJobError("no topic to read: source.tables is empty", fix="list the tables in source.tables")
        options["subscribe"] = ",".join(topics)
    for name, value in {**CONSUMER_DEFAULTS, **java_security_properties(config.kafka.security)}.items():
        options[f"kafka.{name}"] = value
    for name, value in apply.kafka_options.items():
        options[name if name.startswith("kafka.") else f"kafka.{name}"] = value
    return options


def driver_consumer_config(config: BridgeConfig) -> dict[str, str] | None:
    """librdkafka settings for reading a small batch on the driver: the bridge's own connection and security
    settings (as its producer has them), or None when ``apply.kafka_options`` holds anything but fetch tuning and
    ``isolation.level``. Such a key (a keystore, a JAAS or Kerberos setting, ...) is a Java client property with
    no sure librdkafka equal and may be what it takes to connect, so those batches are read by Spark's source."""
    options = {name.removeprefix("kafka."): value for name, value in config.apply.kafka_options.items()}
    if any(name not in _TUNING_KEYS and name not in _SHARED_KEYS for name in options):
        return None
    shared = {name: value for name, value in options.items() if name in _SHARED_KEYS}
    app_id = config.apply.app_id
    return {**config.kafka.client_config(), "client.id": f"{app_id}-driver", "group.id": f"{app_id}-driver", **shared}
