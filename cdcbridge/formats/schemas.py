"""The Avro value schemas (schemas/*.avsc), found in the source tree or in the installed package.

Search order: ``cdcbridge/schemas/`` inside the package (if a build ever ships them there), the
checkout's top-level ``schemas/`` (source tree and editable installs), then ``<data>/share/cdcbridge/schemas``
of the running interpreter's install schemes (where a wheel's ``data-files`` put them).
"""

from __future__ import annotations

import json
import sys
import sysconfig
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import fastavro

import cdcbridge
from cdcbridge.contract import MessageFormat
from cdcbridge.formats.errors import SchemaNotFoundError

#: File name of each format's value schema.
SCHEMA_FILE_NAMES = {MessageFormat.RECORD_IMAGE: "record_image.avsc", MessageFormat.MUTATE_LOG: "mutate_log.avsc"}

#: Where installed wheels put the schemas, relative to an install scheme's data directory.
INSTALLED_SCHEMAS_SUBDIR = Path("share", "cdcbridge", "schemas")


def candidate_dirs() -> list[Path]:
    """Directories searched for the schemas, first match wins."""
    package_dir = Path(cdcbridge.__file__).resolve().parent
    candidates = [package_dir / "schemas"]
    checkout = package_dir.parent
    if (checkout / "pyproject.toml").is_file():
        candidates.append(checkout / "schemas")
    data_dirs = [sysconfig.get_path("data"), sys.prefix]
    user_scheme = sysconfig.get_preferred_scheme("user")
    data_dirs.append(sysconfig.get_path("data", user_scheme))
    for data_dir in data_dirs:
        candidate = Path(data_dir) / INSTALLED_SCHEMAS_SUBDIR
        if candidate not in candidates:
            candidates.append(candidate)
    return candidates


def find_schemas_dir(candidates: Iterable[Path] | None = None) -> Path:
    """First candidate directory holding every schema file; SchemaNotFoundError lists where it looked."""
    searched = list(candidate_dirs() if candidates is None else candidates)
    for directory in searched:
        if all((directory / name).is_file() for name in SCHEMA_FILE_NAMES.values()):
            return directory
    raise SchemaNotFoundError(
        f"Avro schemas {sorted(SCHEMA_FILE_NAMES.values())} not found in any of "
        f"{[str(d) for d in searched]}; reinstall cdcbridge or run from the source checkout"
    )


@cache
def schema_text(message_format: MessageFormat) -> str:
    """The schema exactly as stored: what the registry is given (subject ``<topic>-value``)."""
    return (find_schemas_dir() / SCHEMA_FILE_NAMES[message_format]).read_text(encoding="utf-8")


def schema_dict(message_format: MessageFormat) -> dict[str, Any]:
    """The schema as JSON data (a fresh copy each call)."""
    return json.loads(schema_text(message_format))


@cache
def parsed_schema(message_format: MessageFormat) -> Any:
    """The schema parsed by fastavro, for validating or encoding messages without a registry."""
    return fastavro.parse_schema(schema_dict(message_format))
