"""The target named by ``apply.target``, built from the configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdcbridge.apply.errors import TargetError
from cdcbridge.apply.target import ApplyTarget
from cdcbridge.config import ApplyTarget as TargetKind
from cdcbridge.config import BridgeConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def build_target(config: BridgeConfig, spark: SparkSession) -> ApplyTarget:
    apply = config.apply
    if apply.target is TargetKind.DELTA:
        from cdcbridge.apply.targets.delta import DeltaTarget

        return DeltaTarget(spark, apply.delta_path, apply.dead_letter_table)
    if apply.target is TargetKind.POSTGRES:
        from cdcbridge.apply.targets.postgres import PostgresTarget

        if apply.postgres_dsn is None:
            raise TargetError("apply.target is postgres but apply.postgres_dsn is not set", fix="set it")
        return PostgresTarget(apply.postgres_dsn.get_secret_value(), apply.postgres_schema, apply.dead_letter_table)
    from cdcbridge.apply.targets.tablestore import TablestoreTarget

    return TablestoreTarget.from_config(config)
