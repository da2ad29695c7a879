"""Errors raised while turning change records into Kafka messages; each names the offending thing and the fix."""


class FormatError(Exception):
    """Base of every error raised by cdcbridge.formats."""


class KeyEncodeError(FormatError):
    """A primary-key value cannot be written as a message key (only int64, str and bytes can)."""


class KeyDecodeError(FormatError):
    """Bytes are not a key written by :func:`cdcbridge.formats.keys.encode_key`."""


class InvalidRecordError(FormatError):
    """A change record cannot be represented in the envelope (a decoder bug or a value Tablestore cannot hold)."""


class SchemaNotFoundError(FormatError):
    """The .avsc files are missing from the source tree and from the installed package."""


class TopicNameError(FormatError):
    """A topic name that Kafka would refuse."""
