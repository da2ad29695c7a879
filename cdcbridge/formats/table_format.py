"""How one table is published: which formats, to which topics, with or without tombstones.

Embedded per table in the YAML configuration. Default topic names are the contract's
(:func:`cdcbridge.contract.default_topic_name`): ``<prefix>.<table>.image`` for RECORD_IMAGE (compacted, tombstone
after a row delete) and ``<prefix>.<table>.mutation`` for MUTATE_LOG.
The default format is MUTATE_LOG alone: it needs no read-back of the source row and carries every operation
exactly; add RECORD_IMAGE for a compacted replica of the table.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from cdcbridge.contract import MessageFormat, default_topic_name
from cdcbridge.formats.errors import TopicNameError

_TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"
TopicName = Annotated[str, StringConstraints(pattern=_TOPIC_PATTERN)]


def check_topic_name(name: str) -> str:
    """Return `name` if Kafka accepts it as a topic name, else raise TopicNameError saying why."""
    if not re.fullmatch(_TOPIC_PATTERN, name) or name in {".", ".."}:
        raise TopicNameError(
            f"topic name {name!r} is not valid for Kafka: use 1-249 characters of A-Z a-z 0-9 . _ - "
            "(and not '.' or '..'); check the topic prefix and table name"
        )
    return name


class BridgeTableFormat(BaseModel):
    """Publishing settings of one table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    formats: tuple[MessageFormat, ...] = Field(
        default=(MessageFormat.MUTATE_LOG,),
        min_length=1,
        description="RECORD_IMAGE, MUTATE_LOG or both",
    )
    image_topic: TopicName | None = Field(default=None, description="default <prefix>.<table>.image")
    mutation_topic: TopicName | None = Field(default=None, description="default <prefix>.<table>.mutation")
    tombstones: bool = Field(default=True, description="null value after a row-delete image (compaction)")

    @field_validator("formats", mode="before")
    @classmethod
    def _accept_any_case(cls, value: object) -> object:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list | tuple):
            return [item.upper() if isinstance(item, str) else item for item in value]
        return value

    @field_validator("formats")
    @classmethod
    def _canonical_order(cls, formats: tuple[MessageFormat, ...]) -> tuple[MessageFormat, ...]:
        if len(set(formats)) != len(formats):
            raise ValueError(f"formats lists a format twice: {[f.value for f in formats]}")
        # A record's sub-sequences number its messages format by format; config order must not change them.
        return tuple(f for f in MessageFormat if f in formats)

    @field_validator("image_topic", "mutation_topic")
    @classmethod
    def _not_dots(cls, name: str | None) -> str | None:
        if name in {".", ".."}:
            raise ValueError("topic name cannot be '.' or '..'")
        return name

    @model_validator(mode="after")
    def _distinct_topics(self) -> BridgeTableFormat:
        if len(self.formats) == 2 and self.image_topic is not None and self.image_topic == self.mutation_topic:
            raise ValueError(
                f"image_topic and mutation_topic are both {self.image_topic!r}; the formats need separate "
                "topics (the image topic is compacted, the mutation topic is not)"
            )
        return self

    def topic(self, message_format: MessageFormat, *, prefix: str, table: str) -> str:
        """Topic of one format for `table`: the configured name or ``<prefix>.<table>.<image|mutation>``."""
        configured = self.image_topic if message_format is MessageFormat.RECORD_IMAGE else self.mutation_topic
        if configured is not None:
            return configured
        return check_topic_name(default_topic_name(message_format, prefix=prefix, table=table))

    def topics(self, *, prefix: str, table: str) -> dict[MessageFormat, str]:
        """Topic of every enabled format, in canonical format order."""
        return {f: self.topic(f, prefix=prefix, table=table) for f in self.formats}
