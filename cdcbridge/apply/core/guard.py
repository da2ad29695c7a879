"""The apply guard: an operation changes a row only if it is newer than the last one applied to that row.

seq_keys are equal-width zero-padded digit strings, so "newer" is a plain text comparison, the same one a target
can run in its write condition (Delta MERGE / PostgreSQL ``WHERE t._seq < s._seq``, both with byte-wise
collation) to protect against a concurrent writer between reading the row and writing it back. This comparison
makes redelivered operations no-ops, whatever batch they arrive in, increments included.
"""

from __future__ import annotations


def is_newer(seq_key: str, row_seq: str | None) -> bool:
    """Whether an operation at `seq_key` may apply to a row whose last applied operation is `row_seq`."""
    return row_seq is None or seq_key > row_seq
