"""The hashes of every key a Delta table holds, kept by the job that filled the table from empty.

Why: a batch of new keys written first must not hold a key the table holds. Checked against the table, that is a
Spark job over the key columns of every file whose key bounds meet the batch's: all of them when keys arrive in
random order, as in a first load. A job that saw the table empty and made every commit since knows each key it
wrote: the hashes of an append's keys are observed while it is written, and the check becomes a lookup on the
driver. The hashes are of the keys in the messages' form (:func:`~cdcbridge.apply.spark.fold.message_key_hash`), so
the set of a batch's message keys that the job observes anyway serves as the written keys. The hashes are valid at
one table version: any other commit (another writer's, or a MERGE of this job) leaves them behind the table, and
they are not used again. A hash collision, or a key in the set whose messages changed no row, only reports a key as
stored, which sends that batch to the paths that read the table. At most `max_keys` hashes (8 bytes each) are kept
per table; beyond, the table's key columns are read again.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation

#: The most key hashes kept per table (80 MB).
KEY_HASHES_MAX = 10_000_000
_HASHES = "key_hashes"


class KeyHashes:
    """Per table path: the table version and the sorted hashes of every key the table holds at that version."""

    def __init__(self, max_keys: int = KEY_HASHES_MAX) -> None:
        self.max_keys = max_keys
        self._tables: dict[str, tuple[int, np.ndarray]] = {}

    def start(self, path: str, version: int) -> None:
        """The table holds no row at `version`."""
        if self.max_keys > 0:
            self._tables[path] = (version, np.empty(0, dtype=np.int64))

    def at(self, path: str, version: int) -> np.ndarray | None:
        """The hashes of the table's keys at `version`, if known."""
        known = self._tables.get(path)
        return known[1] if known is not None and known[0] == version else None

    def appended(self, path: str, read_version: int, version: int, written: np.ndarray) -> None:
        """An append of keys hashing to `written`, read at `read_version`, committed as `version`: the hashes move
        to `version` if they were known at `read_version` and no other commit came between."""
        known = self._tables.pop(path, None)
        if known is None or known[0] != read_version or version != read_version + 1:
            return
        merged = np.sort(np.concatenate([known[1], written]), kind="stable")  # two sorted runs: a merge
        if merged.size <= self.max_keys:
            self._tables[path] = (version, merged)


def held(stored: np.ndarray, written: np.ndarray) -> int:
    """How many of `written` are among `stored` (sorted)."""
    if stored.size == 0 or written.size == 0:
        return 0
    found = np.minimum(np.searchsorted(stored, written), stored.size - 1)
    return int(np.count_nonzero(stored[found] == written))


def observed_key_hashes(frame: DataFrame, key_hash: Column) -> tuple[DataFrame, Observation]:
    """`frame` observed for the hashes of its keys (`key_hash`: the hash of a row's key in the messages' form),
    which :func:`written_key_hashes` reads once an action wrote it."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation()
    return frame.observe(observation, F.to_json(F.collect_set(key_hash)).alias(_HASHES)), observation


def written_key_hashes(observation: Observation) -> np.ndarray:
    """The sorted key hashes :func:`observed_key_hashes` observed (call only after the frame was written)."""
    values = json.loads(observation.get[_HASHES] or "[]")
    return np.sort(np.asarray(values, dtype=np.int64))
