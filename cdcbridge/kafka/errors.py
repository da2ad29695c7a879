"""Errors of the Kafka side; each message names the topic/subject and what to do."""


class KafkaSideError(Exception):
    """Base of every Kafka, topic and schema-registry error the bridge raises."""


class TopicPartitionMismatchError(KafkaSideError):
    """A topic's partition count differs from the one the bridge created and recorded: per-row order would break."""


class BrokerUnreachableError(KafkaSideError):
    """No broker answered within the timeout."""


class RegistryUnreachableError(KafkaSideError):
    """The schema registry did not answer."""


class SchemaIncompatibleError(KafkaSideError):
    """The registry refused our schema under the subject's compatibility rule."""


class MessageTooLargeError(KafkaSideError):
    """A message is larger than the topic or broker accepts.

    `size` is the message's own size: the broker refuses a whole batch when one of its messages is too large, so the
    largest refused message of a batch names the culprit.
    """

    def __init__(self, message: str, *, size: int = 0) -> None:
        super().__init__(message)
        self.size = size


class ProduceFatalError(KafkaSideError):
    """Kafka reported a delivery failure that retrying inside the producer cannot fix."""
