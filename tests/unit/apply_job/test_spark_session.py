import os

import pytest

from cdcbridge.apply.spark.session import local_cores


@pytest.mark.parametrize(
    ("master", "cores"),
    [("local", 1), ("local[2]", 2), ("local[16]", 16), ("local[3,4]", 3), ("local[*]", os.cpu_count() or 1)],
)
def test_a_local_master_names_its_cores(master: str, cores: int) -> None:
    assert local_cores(master) == cores


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "local[x]", "local-cluster[2,1,1024]"])
def test_other_masters_leave_the_shuffle_partitions_to_spark(master: str) -> None:
    assert local_cores(master) is None
