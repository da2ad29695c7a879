"""Running Spark without generated code, so expressions are evaluated row by row (``eval``).

Spark runs an expression through the code it generates for a plan, and through ``eval`` where it cannot generate
code (a plan too large to compile, or compilation failing); the compiled functions of the apply job must give the
same results both ways.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The session confs that turn generated code off: whole-stage code generation and generated projections.
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


@contextmanager
def without_generated_code(spark: Any) -> Iterator[None]:
    """`spark` with :data:`INTERPRETED` set, restored afterwards."""
    saved = {name: spark.conf.get(name, None) for name in INTERPRETED}
    for name, value in INTERPRETED.items():
        spark.conf.set(name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, value)
