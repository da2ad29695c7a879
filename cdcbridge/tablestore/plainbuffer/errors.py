"""The one exception family of the PlainBuffer codec."""

from __future__ import annotations


class PlainBufferError(Exception):
    """Bytes are not valid PlainBuffer, or a value cannot be encoded.

    `reason` says what was wrong, `offset` where in the input (None for encoding errors). Callers that know
    which stream record was being decoded fill in `shard_id` and `record_index`, so the message points at it.
    """

    def __init__(
        self,
        reason: str,
        offset: int | None = None,
        *,
        shard_id: str | None = None,
        record_index: int | None = None,
    ) -> None:
        super().__init__(reason, offset)
        self.reason = reason
        self.offset = offset
        self.shard_id = shard_id
        self.record_index = record_index

    def with_context(self, *, shard_id: str | None = None, record_index: int | None = None) -> PlainBufferError:
        """Attach the stream position being decoded; returns self so callers can `raise err.with_context(...)`."""
        if shard_id:  # "" = not known to the caller (iterators are opaque): keep whatever is known
            self.shard_id = shard_id
        if record_index is not None:
            self.record_index = record_index
        return self

    def __str__(self) -> str:
        where = []
        if self.shard_id is not None:
            where.append(f"shard {self.shard_id!r}")
        if self.record_index is not None:
            where.append(f"record #{self.record_index}")
        if self.offset is not None:
            where.append(f"byte offset {self.offset}")
        prefix = "invalid PlainBuffer" + (f" ({', '.join(where)})" if where else "")
        return f"{prefix}: {self.reason}"


class PlainBufferEncodeError(PlainBufferError, TypeError):
    """A Python value cannot be written as PlainBuffer (wrong type, out of range, misplaced sentinel)."""

    def __str__(self) -> str:
        return f"cannot encode PlainBuffer: {self.reason}"
