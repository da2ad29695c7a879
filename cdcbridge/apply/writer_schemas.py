"""Writer schemas by Confluent schema id, fetched from the registry on the driver and cached for the job's life.

The job preloads every version of its topics' subjects at start; an id met later (the bridge evolved the
envelope while the job runs, or a topic pattern) is looked up by id. A batch may hold several ids. Each id's
schema tells which envelope it is (record name ``MutateLog`` or ``RecordImage``); Spark decodes each id with its
own writer schema into our reader schema (schemas/*.avsc), so every id of a format gives the same columns. Ids
are immutable in a registry, so a cached answer never goes stale; registry load is O(distinct ids).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from cdcbridge.apply.errors import RegistryLookupError
from cdcbridge.contract import MessageFormat

#: Envelope record names (schemas/*.avsc) → format.
ENVELOPE_NAMES = {"MutateLog": MessageFormat.MUTATE_LOG, "RecordImage": MessageFormat.RECORD_IMAGE}


@dataclass(frozen=True, slots=True)
class WriterSchema:
    """A registered schema; ``problem`` says why messages written with it cannot be applied."""

    schema_id: int
    text: str | None
    message_format: MessageFormat | None
    problem: str | None = None


def classify(schema_id: int, text: str) -> WriterSchema:
    """Which envelope a schema text is, or why it is none."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return WriterSchema(schema_id, text, None, f"schema id {schema_id} is not JSON Avro")
    name = parsed.get("name", "") if isinstance(parsed, dict) else ""
    short_name = name.rsplit(".", 1)[-1]
    message_format = ENVELOPE_NAMES.get(short_name)
    if message_format is None or parsed.get("type") != "record":
        return WriterSchema(
            schema_id, text, None, f"schema id {schema_id} is {name or 'an unnamed schema'!r}, not a cdcbridge envelope"
        )
    return WriterSchema(schema_id, text, message_format)


class WriterSchemas:
    """Cache of writer schemas by id in front of a Confluent-compatible registry."""

    def __init__(self, registry_config: Mapping[str, str]) -> None:
        self._client = SchemaRegistryClient(dict(registry_config))
        self._url = registry_config.get("url", "?")
        self._cache: dict[int, WriterSchema] = {}

    def known(self) -> dict[int, WriterSchema]:
        """Every schema fetched so far."""
        return dict(self._cache)

    def preload(self, subjects: Iterable[str]) -> dict[int, WriterSchema]:
        """Fetch every version of `subjects` (``<topic>-value``), so batches decode without looking ids up
        first; a subject not registered yet is skipped (its first messages make the job look their id up)."""
        for subject in subjects:
            try:
                versions = self._client.get_versions(subject)
                for version in versions:
                    registered = self._client.get_version(subject, version)
                    if registered.schema_id not in self._cache:
                        self._cache[registered.schema_id] = classify(registered.schema_id, registered.schema.schema_str)
            except SchemaRegistryError as error:
                if error.http_status_code == 404:
                    continue
                raise RegistryLookupError(
                    f"registry {self._url} answered HTTP {error.http_status_code} for subject {subject}: "
                    f"{error.error_message}"
                ) from error
            except Exception as error:  # connection refused, timeouts: the client raises httpx's own types
                raise RegistryLookupError(
                    f"registry {self._url} did not answer for subject {subject} ({type(error).__name__}: {error})"
                ) from error
        return self.known()

    def resolve(self, schema_ids: Iterable[int]) -> dict[int, WriterSchema]:
        """The schemas of `schema_ids`, fetching unknown ones; an id the registry does not know gives a
        WriterSchema with a problem (its messages are bad input), an unreachable registry raises."""
        result: dict[int, WriterSchema] = {}
        for schema_id in schema_ids:
            if schema_id not in self._cache:
                self._cache[schema_id] = self._fetch(schema_id)
            result[schema_id] = self._cache[schema_id]
        return result

    def _fetch(self, schema_id: int) -> WriterSchema:
        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as error:
            if error.http_status_code == 404:
                return WriterSchema(schema_id, None, None, f"schema id {schema_id} is unknown to the registry")
            raise RegistryLookupError(
                f"registry {self._url} answered HTTP {error.http_status_code} for schema id {schema_id}: "
                f"{error.error_message}"
            ) from error
        except Exception as error:  # connection refused, timeouts: the client raises httpx's own types
            raise RegistryLookupError(
                f"registry {self._url} did not answer for schema id {schema_id} ({type(error).__name__}: {error})"
            ) from error
        if schema.schema_type not in (None, "AVRO"):
            return WriterSchema(schema_id, None, None, f"schema id {schema_id} is {schema.schema_type}, not Avro")
        return classify(schema_id, schema.schema_str)
