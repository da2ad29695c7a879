"""Register the value schemas in the registry (subject `<topic>-value`, FULL_TRANSITIVE) and serialize with
confluent-kafka's AvroSerializer, so the Confluent wire format and id caching are the library's, not ours."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from cdcbridge.kafka.errors import KafkaSideError, RegistryUnreachableError, SchemaIncompatibleError

COMPATIBILITY = "FULL_TRANSITIVE"
#: HTTP answers that say "try again later" rather than "this request is wrong".
_RETRYABLE_STATUSES = frozenset({408, 425, 429})


class RegistryRefusedError(KafkaSideError):
    """The registry answered, and refused: bad credentials, no permission, a wrong URL path. Retrying the same
    request cannot help, so the bridge stops with the setting to fix instead of retrying forever."""


def _refusal_fix(status: int) -> str:
    if status == 401:
        return "check kafka.schema_registry.basic_auth_user_info (user:password) or the credentials in the URL"
    if status == 403:
        return "grant this user write access to the subject in the registry, or use a user that has it"
    if status == 404:
        return (
            "check kafka.schema_registry.url: it must be the Confluent-compatible API base "
            "(Apicurio: http://host:port/apis/ccompat/v7)"
        )
    return "check kafka.schema_registry.url and the registry's log"


def subject_for(topic: str) -> str:
    return f"{topic}-value"


@contextmanager
def _registry_errors(subject: str, doing: str) -> Iterator[None]:
    """Transport failures and unexpected registry answers become RegistryUnreachableError; a 409 on
    registration (incompatible schema) passes through for the caller to name."""
    try:
        yield
    except SchemaRegistryError as error:
        status = error.http_status_code or 0
        if status == 409 and doing == "registering":
            raise
        if 400 <= status < 500 and status not in _RETRYABLE_STATUSES:
            raise RegistryRefusedError(
                f"the schema registry refused {doing} subject {subject}: HTTP {status} {error.error_message}; "
                f"{_refusal_fix(status)}"
            ) from error
        raise RegistryUnreachableError(
            f"schema registry error while {doing} subject {subject}: HTTP {error.http_status_code} "
            f"{error.error_message}"
        ) from error
    except (SchemaIncompatibleError, RegistryUnreachableError, RegistryRefusedError):
        raise
    except Exception as error:  # connection refused, DNS, timeouts: httpx raises its own types
        raise RegistryUnreachableError(
            f"the schema registry did not answer while {doing} subject {subject} ({type(error).__name__}: "
            f"{error}); check kafka.schema_registry.url and that the registry runs"
        ) from error


class TopicValueSerializers:
    """One AvroSerializer per topic, each bound to the schema registered for that topic at start-up."""

    def __init__(self, registry: SchemaRegistryClient, schema_by_topic: Mapping[str, str]) -> None:
        self._registry = registry
        self._schema_by_topic = dict(schema_by_topic)
        self._serializers: dict[str, AvroSerializer] = {}
        self._contexts: dict[str, SerializationContext] = {}
        self.schema_ids: dict[str, int] = {}

    def register_all(self) -> dict[str, int]:
        """Set FULL_TRANSITIVE on each subject and register our schema; refuse clearly if incompatible."""
        for topic, schema_str in self._schema_by_topic.items():
            subject = subject_for(topic)
            with _registry_errors(subject, "setting the compatibility of"):
                self._ensure_compatibility(subject)
            try:
                with _registry_errors(subject, "registering"):
                    schema_id = self._registry.register_schema(subject, Schema(schema_str, "AVRO"))
            except SchemaRegistryError as error:
                raise SchemaIncompatibleError(
                    f"the registry refused the schema for subject {subject} as incompatible under "
                    f"{COMPATIBILITY} ({error.error_message}); evolve schemas only by adding fields with "
                    "defaults, or write to a new topic"
                ) from error
            self.schema_ids[topic] = schema_id
            self._serializers[topic] = AvroSerializer(
                self._registry,
                schema_str,
                conf={"auto.register.schemas": True},  # cached after the call above
            )
            self._contexts[topic] = SerializationContext(topic, MessageField.VALUE)
        return dict(self.schema_ids)

    def _ensure_compatibility(self, subject: str) -> None:
        """Idempotent: peers starting together race to create the rule; the loser sees 409 and re-reads it."""
        try:
            self._registry.set_compatibility(subject_name=subject, level=COMPATIBILITY)
        except SchemaRegistryError as error:
            if error.http_status_code != 409:
                raise
            current = self._registry.get_compatibility(subject)
            if current != COMPATIBILITY:
                raise RegistryUnreachableError(
                    f"subject {subject} has compatibility {current}, and setting {COMPATIBILITY} conflicted; "
                    f"set it to {COMPATIBILITY} in the registry"
                ) from error

    def serialize(self, topic: str, value: Mapping[str, Any] | None) -> bytes | None:
        """Confluent-framed Avro bytes; None stays None (a Kafka tombstone)."""
        if value is None:
            return None
        return self._serializers[topic](value, self._contexts[topic])
