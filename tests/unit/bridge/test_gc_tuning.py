"""The worker process's cycle-collector settings: start-up objects frozen, young generation collected less often."""

from __future__ import annotations

import gc

from cdcbridge.bridge.gc_tuning import OLDER_THRESHOLDS, YOUNG_THRESHOLD, tune_for_throughput


def test_tuning_freezes_start_up_objects_and_raises_the_thresholds() -> None:
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    try:
        assert tune_for_throughput() == before
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
        assert gc.get_freeze_count() > frozen_before
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
