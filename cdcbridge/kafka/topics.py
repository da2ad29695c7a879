"""Create the bridge's topics with a fixed partition count and refuse to run when a count changed.

Records of one row go to one partition only while the partition count stays fixed (the key hash is taken modulo
the count), so a changed count would silently reorder a row's changes. The count is recorded when the bridge creates
a topic; any later difference stops the bridge with an explanation instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from cdcbridge.kafka.errors import BrokerUnreachableError, KafkaSideError, TopicPartitionMismatchError


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    cleanup_policy: str = "delete"  # "compact" for RECORD_IMAGE topics: the last image per key is the row
    replication_factor: int = 1
    config: Mapping[str, str] = field(default_factory=dict)

    def topic_config(self) -> dict[str, str]:
        return {"cleanup.policy": self.cleanup_policy, **dict(self.config)}


class TopicRefusedError(KafkaSideError):
    """Kafka answered and refused to create or describe a topic (permissions, policy, replication); retrying the
    same request cannot help, so the message names the topic and the setting or grant to fix."""


class KafkaClientConfigError(KafkaSideError):
    """librdkafka refused the client settings before connecting (unknown SASL mechanism, unreadable CA file ...)."""


def _refusal_fix(code: str, spec: TopicSpec | None) -> str:
    if spec is None:  # describing an existing topic
        if code == "TOPIC_AUTHORIZATION_FAILED":
            return "grant the bridge's Kafka user DESCRIBE on the topic"
        return "check the broker's log"
    create_yourself = (
        f"or create it yourself with {spec.partitions} partitions and cleanup.policy={spec.cleanup_policy} (the "
        "bridge then checks and records its count)"
    )
    if code == "INVALID_REPLICATION_FACTOR":
        return f"set kafka.replication_factor to at most the number of brokers, {create_yourself}"
    if code in ("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"):
        return f"grant the bridge's Kafka user CREATE and DESCRIBE on the topic, {create_yourself}"
    if code == "INVALID_TOPIC_EXCEPTION":
        return "configure a valid topic name (letters, digits, '.', '_', '-'; at most 249 characters)"
    return f"check the broker's log, {create_yourself}"


def _refused(doing: str, topic: str, spec: TopicSpec | None, error: KafkaException) -> KafkaSideError:
    """A retriable failure is an unreachable broker (the bridge retries at start); anything else is a refusal."""
    kafka_error = error.args[0]
    if kafka_error.retriable() or kafka_error.name() in ("_TRANSPORT", "_TIMED_OUT", "REQUEST_TIMED_OUT"):
        return BrokerUnreachableError(f"{doing} topic {topic} got no answer from Kafka ({kafka_error.str()})")
    return TopicRefusedError(
        f"Kafka refused {doing} topic {topic}: {kafka_error.name()}: {kafka_error.str()}; "
        f"{_refusal_fix(kafka_error.name(), spec)}"
    )


class _DiscardLogs:
    """A `logger` for librdkafka that drops every line (confluent-kafka calls ``log(level, fmt, *args)``)."""

    def log(self, *args: object, **kwargs: object) -> None:
        return None


_DISCARD_LIBRDKAFKA_LOGS = _DiscardLogs()


class TopicAdmin:
    """Thin policy layer over confluent-kafka's AdminClient."""

    def __init__(self, client_config: Mapping[str, str], timeout: float = 30.0, *, quiet: bool = False) -> None:
        """`quiet`: for a caller that reports a failure in its own words (a one-shot command such as `status`), so
        librdkafka's own lines ("Connect to ... failed") are not printed beside it; a worker keeps them, they say why
        a broker refuses it (e.g. a failed SASL handshake)."""
        settings: dict[str, object] = dict(client_config)
        if quiet:
            settings.update(log_level=0, logger=_DISCARD_LIBRDKAFKA_LOGS)
        try:
            self._admin = AdminClient(settings)
        except KafkaException as error:  # librdkafka checks settings (and reads CA / key files) right here
            raise KafkaClientConfigError(
                f"the Kafka client settings are unusable: {error.args[0].str()}; check kafka.bootstrap_servers and "
                "kafka.security (protocol, sasl_mechanism, sasl_username and sasl_password, ssl_*_location files)"
            ) from error
        self._timeout = timeout
        self._bootstrap = client_config.get("bootstrap.servers", "?")

    def partition_counts(self, names: Iterable[str]) -> dict[str, int]:
        """Partition count of each existing topic among `names`."""
        try:
            metadata = self._admin.list_topics(timeout=self._timeout)
        except KafkaException as error:
            raise BrokerUnreachableError(
                f"no Kafka broker answered at {self._bootstrap} within {self._timeout:.0f}s ({error.args[0].str()}); "
                "check kafka.bootstrap_servers, that the brokers run, and that kafka.security matches their "
                "listener (protocol, SASL mechanism and credentials, CA)"
            ) from error
        present = [name for name in dict.fromkeys(names) if name in metadata.topics]
        if not present:
            return {}
        # list_topics may answer from a cached view; DescribeTopics asks the controller for the current count.
        futures = self._admin.describe_topics(TopicCollection(present), request_timeout=self._timeout)
        counts = {}
        for name, future in futures.items():
            try:
                counts[name] = len(future.result(timeout=self._timeout).partitions)
            except KafkaException as error:
                raise _refused("describing", name, None, error) from error
        return counts

    def max_message_bytes(self, names: Iterable[str]) -> dict[str, int]:
        """Each existing topic's `max.message.bytes` (what the broker accepts per record batch)."""
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in dict.fromkeys(names)]
        limits = {}
        for resource, future in self._admin.describe_configs(resources, request_timeout=self._timeout).items():
            try:
                entries = future.result(timeout=self._timeout)
            except KafkaException as error:
                raise _refused("describing the configuration of", resource.name, None, error) from error
            limits[resource.name] = int(entries["max.message.bytes"].value)
        return limits

    def _check_counts(self, specs: list[TopicSpec], existing: dict[str, int], recorded: Mapping[str, int]) -> None:
        for spec in specs:
            if spec.name not in existing:
                continue
            expected = recorded.get(spec.name, spec.partitions)
            actual = existing[spec.name]
            if actual != expected:
                origin = "recorded when the bridge created it" if spec.name in recorded else "configured"
                raise TopicPartitionMismatchError(
                    f"topic {spec.name} has {actual} partitions but {expected} were {origin}; changing the count "
                    "moves keys to other partitions and breaks per-row order. Restore the topic with "
                    f"{expected} partitions, or configure a new topic name (and re-snapshot) to use {actual}"
                )

    def _wait_visible(self, specs: list[TopicSpec]) -> dict[str, int]:
        """Metadata of topics created a moment ago may lag behind; wait (bounded) until every one is listed."""
        names = [spec.name for spec in specs]
        deadline = time.monotonic() + self._timeout
        while True:
            counts = self.partition_counts(names)
            if len(counts) == len(names) or time.monotonic() > deadline:
                return counts
            time.sleep(0.2)

    def ensure(self, specs: Iterable[TopicSpec], recorded: Mapping[str, int]) -> dict[str, int]:
        """Create missing topics; check existing ones against the recorded (else configured) count.

        Returns the partition count of every topic, to be recorded by the caller.
        """
        specs = list(specs)
        existing = self.partition_counts(spec.name for spec in specs)
        self._check_counts(specs, existing, recorded)
        missing = [spec for spec in specs if spec.name not in existing]
        if missing:
            futures = self._admin.create_topics(
                [NewTopic(s.name, s.partitions, s.replication_factor, config=s.topic_config()) for s in missing],
                operation_timeout=self._timeout,
            )
            raced = []
            for spec in missing:
                try:
                    futures[spec.name].result(timeout=self._timeout)
                    existing[spec.name] = spec.partitions  # created by us, with exactly this count
                except KafkaException as error:
                    if error.args[0].name() != "TOPIC_ALREADY_EXISTS":
                        raise _refused("creating", spec.name, spec, error) from error
                    raced.append(spec)  # a peer created it at the same moment: check what it created
            if raced:
                existing.update(self._wait_visible(raced))
                self._check_counts(raced, existing, recorded)
        return {spec.name: existing[spec.name] for spec in specs}
