"""The key hashes a job keeps for a Delta table it filled from empty (:mod:`cdcbridge.apply.targets.delta_key_hashes`):
valid at one version, moved only by an append read at that version and committed right after it."""

from __future__ import annotations

import numpy as np

from cdcbridge.apply.targets.delta_key_hashes import KeyHashes, held


def _hashes(*values: int) -> np.ndarray:
    return np.sort(np.asarray(values, dtype=np.int64))


def test_the_hashes_follow_the_appends_committed_right_after_the_version_they_were_read_at() -> None:
    hashes = KeyHashes()
    assert hashes.at("t", 0) is None  # a table the job did not see empty
    hashes.start("t", 0)
    hashes.appended("t", 0, 1, _hashes(5, -3))
    hashes.appended("t", 1, 2, _hashes(7, 2**62))
    assert hashes.at("t", 1) is None
    assert hashes.at("t", 2).tolist() == [-3, 5, 7, 2**62]
    assert held(hashes.at("t", 2), _hashes(-3, 4, 2**62, 8)) == 2


def test_another_commit_between_read_and_append_leaves_the_hashes_unknown() -> None:
    hashes = KeyHashes()
    hashes.start("t", 3)
    hashes.appended("t", 3, 5, _hashes(1))  # version 4 is another writer's
    assert (hashes.at("t", 5), hashes.at("t", 3)) == (None, None)
    hashes.start("t", 6)
    hashes.appended("t", 4, 7, _hashes(1))  # read at a version the hashes were not known at
    assert hashes.at("t", 7) is None


def test_beyond_max_keys_the_hashes_are_dropped_and_zero_keeps_none() -> None:
    hashes = KeyHashes(max_keys=3)
    hashes.start("t", 0)
    hashes.appended("t", 0, 1, _hashes(1, 2, 3))
    assert hashes.at("t", 1).tolist() == [1, 2, 3]
    hashes.appended("t", 1, 2, _hashes(4))
    assert hashes.at("t", 2) is None
    off = KeyHashes(max_keys=0)
    off.start("t", 0)
    assert off.at("t", 0) is None


def test_held_counts_written_hashes_found_among_the_stored_ones() -> None:
    assert held(_hashes(), _hashes(1)) == 0
    assert held(_hashes(1, 3), _hashes()) == 0
    assert held(_hashes(1, 3, 9), _hashes(0, 3, 10)) == 1  # below the first, among, above the last
