"""What the apply job does with a message it cannot apply: stop (default) or set it aside as a dead letter.

Never a silent drop: with ``stop`` the :class:`~cdcbridge.apply.errors.BadInputError` propagates and the batch
fails (Spark retries it; it fails again until the producer or the job is fixed); with ``dead_letter`` the message
and its error are returned in the result for the job to write to a dead-letter collection, and the rest of the
batch applies.

A dead-lettered operation does not advance the row's ``_seq``: if it is redelivered before a newer operation on
the same row is applied, it is dead-lettered again. Dead-letter consumers should therefore expect duplicates and
can recognise them by topic/partition/offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cdcbridge.apply.errors import BadInputError, InvalidSettingError, MessageLocation


class BadInputAction(StrEnum):
    STOP = "stop"
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that was not applied, with the reason."""

    error: BadInputError
    message: Mapping[str, Any] | None

    @property
    def location(self) -> MessageLocation | None:
        return self.error.location

    def to_record(self) -> dict[str, Any]:
        """Plain-dict form for a dead-letter table or topic (``message`` is the decoded envelope as given)."""
        location = self.location or MessageLocation()
        return {
            "topic": location.topic,
            "partition": location.partition,
            "offset": location.offset,
            "error_type": type(self.error).__name__,
            "error": str(self.error),
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class BadInputPolicy:
    """``BadInputPolicy()`` stops on the first bad message; ``BadInputPolicy("dead_letter")`` sets them aside."""

    action: BadInputAction = BadInputAction.STOP

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "action", BadInputAction(self.action))
        except ValueError:
            raise InvalidSettingError(
                f"on_bad_input is {self.action!r}", fix="use 'stop' (the default) or 'dead_letter'"
            ) from None

    def handle(self, error: BadInputError, message: Mapping[str, Any] | None) -> DeadLetter:
        """Raise `error` (stop) or return the dead letter to collect."""
        if self.action is BadInputAction.STOP:
            raise error
        return DeadLetter(error=error, message=message)
