"""Source-table set-up through the official SDK: create a table (with its stream), turn a table's stream on, and
describe both, so `cdcbridge table ...` works the same on a real Tablestore instance and on the emulator.

The bridge only reads streams; these calls exist so a user never has to write Python to get a table replicated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tablestore import CapacityUnit, ReservedThroughput, TableMeta, TableOptions
from tablestore.error import OTSServiceError

from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.errors import StreamError, TableNotFoundError, map_sdk_error

#: Primary-key column types Tablestore has, by the name users write (`--pk id:string`) → the SDK's name.
PK_TYPES = {"string": "STRING", "integer": "INTEGER", "binary": "BINARY"}
#: Tablestore allows 1 to 4 primary-key columns.
MAX_PK_COLUMNS = 4
#: Stream record retention when none is given; the service's default console choice, and what the demo uses.
DEFAULT_EXPIRATION_HOURS = 24
#: The longest retention the service accepts (7 days).
MAX_EXPIRATION_HOURS = 168


class TableAdminError(StreamError):
    """A table set-up request cannot be done as asked; the message names the table and the fix."""


class TableExistsError(TableAdminError):
    """CreateTable for a name that exists."""


class StreamAlreadyEnabledError(TableAdminError):
    """Enabling the stream of a table whose stream is already on."""


class PrimaryKeySpecError(TableAdminError):
    """A `--pk` specification that is not `name:type,...` with known types."""


@dataclass(frozen=True)
class TableDescription:
    """What `cdcbridge table describe` shows: the primary key, the stream and its shards."""

    name: str
    primary_key: tuple[tuple[str, str], ...]
    max_versions: int | None
    time_to_live: int | None
    stream_enabled: bool
    stream_id: str | None = None
    expiration_hours: int | None = None
    shard_ids: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "primary_key": [{"name": name, "type": kind.lower()} for name, kind in self.primary_key],
            "max_versions": self.max_versions,
            "time_to_live": self.time_to_live,
            "stream": {
                "enabled": self.stream_enabled,
                "stream_id": self.stream_id,
                "expiration_hours": self.expiration_hours,
                "shards": list(self.shard_ids),
            },
        }

    def lines(self) -> list[str]:
        key = ", ".join(f"{name}:{kind.lower()}" for name, kind in self.primary_key)
        stream = (
            f"enabled, id {self.stream_id}, records kept {self.expiration_hours} h, {len(self.shard_ids)} shard(s)"
            if self.stream_enabled
            else f"disabled (enable it: cdcbridge table enable-stream {self.name})"
        )
        return [f"table        {self.name}", f"primary key  {key}", f"stream       {stream}"]


def parse_primary_key(spec: str) -> list[tuple[str, str]]:
    """`id:string,seq:integer` → [("id", "STRING"), ("seq", "INTEGER")], in key order."""
    columns: list[tuple[str, str]] = []
    for part in (p.strip() for p in spec.split(",")):
        name, colon, kind = part.partition(":")
        name, kind = name.strip(), kind.strip().lower()
        if not part or not colon or not name:
            raise PrimaryKeySpecError(
                f"primary key column {part!r} is not NAME:TYPE; write e.g. --pk id:string,seq:integer"
            )
        if kind not in PK_TYPES:
            raise PrimaryKeySpecError(
                f"primary key column {name} has type {kind!r}; use one of {', '.join(PK_TYPES)} (e.g. {name}:string)"
            )
        if any(name == seen for seen, _ in columns):
            raise PrimaryKeySpecError(f"primary key column {name} is listed twice in --pk; name each column once")
        columns.append((name, PK_TYPES[kind]))
    if not 1 <= len(columns) <= MAX_PK_COLUMNS:
        raise PrimaryKeySpecError(
            f"a Tablestore primary key has 1 to {MAX_PK_COLUMNS} columns, --pk gives {len(columns)}"
        )
    return columns


def _check_expiration(table: str, hours: int) -> None:
    if not 1 <= hours <= MAX_EXPIRATION_HOURS:
        raise TableAdminError(
            f"--expiration-hours {hours} for table {table}: the stream keeps records 1 to {MAX_EXPIRATION_HOURS} "
            "hours; pick a value in that range"
        )


class TableAdmin:
    """Create, describe and stream-enable source tables through an OTSClient (with the stream APIs installed)."""

    def __init__(self, streams: StreamClient) -> None:
        self._streams = streams
        self._ots = streams.ots_client

    def create(
        self,
        name: str,
        primary_key: list[tuple[str, str]],
        *,
        stream_hours: int | None,
        if_not_exists: bool = False,
    ) -> bool:
        """Create the table (with its stream on when `stream_hours` is set); True when created.

        With `if_not_exists`, an existing table with the same primary key is accepted (its stream turned on if asked
        and still off): a set-up step run on every start (the compose one-shot service) must not fail the second time.
        """
        if stream_hours is not None:
            _check_expiration(name, stream_hours)
        meta = TableMeta(name, primary_key)
        options = TableOptions(time_to_live=-1, max_version=1)
        throughput = ReservedThroughput(CapacityUnit(0, 0))
        try:
            if stream_hours is None:
                self._ots.create_table(meta, options, throughput)
            else:
                self._streams.create_table_with_stream(meta, options, throughput, stream_hours)
            return True
        except Exception as error:  # service errors, and transport failures the SDK lets through from urllib3
            if _error_code(error) != "OTSObjectAlreadyExist":
                raise map_sdk_error(error, api="CreateTable", table=name) from error
        if not if_not_exists:
            raise TableExistsError(
                f"table {name} already exists; use it as it is (cdcbridge table describe {name}), pick another name, "
                "or pass --if-not-exists"
            )
        existing = self.describe(name)
        if [(n, k) for n, k in existing.primary_key] != primary_key:
            raise TableExistsError(
                f"table {name} already exists with primary key {_key_text(existing.primary_key)}, not "
                f"{_key_text(primary_key)}; use that key or another table name"
            )
        if stream_hours is not None and not existing.stream_enabled:
            self._streams.enable_stream(name, stream_hours)
        return False

    def enable_stream(self, name: str, expiration_hours: int = DEFAULT_EXPIRATION_HOURS) -> TableDescription:
        """Turn the table's stream on; an already enabled stream is an error (re-enabling would not change it)."""
        _check_expiration(name, expiration_hours)
        try:
            current = self._streams.describe_table_stream(name)
        except TableNotFoundError:
            raise TableAdminError(_missing_table(name, stream=True)) from None
        if current.enabled:
            raise StreamAlreadyEnabledError(
                f"table {name} already has its stream enabled (id {current.stream_id}, records kept "
                f"{current.expiration_hours} h); nothing to do: the bridge can replicate it"
            )
        self._streams.enable_stream(name, expiration_hours)
        return self.describe(name)

    def describe(self, name: str) -> TableDescription:
        """The table's primary key, options, stream settings and current shards."""
        try:
            response = self._ots.describe_table(name)
        except Exception as error:  # service errors, and transport failures the SDK lets through from urllib3
            mapped = map_sdk_error(error, api="DescribeTable", table=name)
            if isinstance(mapped, TableNotFoundError):
                raise TableAdminError(_missing_table(name, stream=False)) from None
            raise mapped from error
        stream = self._streams.describe_table_stream(name)
        shards: tuple[str, ...] = ()
        if stream.enabled and stream.stream_id:
            shards = tuple(s.shard_id for s in self._streams.list_all_shards(stream.stream_id))
        meta, options = response.table_meta, response.table_options
        return TableDescription(
            name=name,
            primary_key=tuple((column[0], str(column[1])) for column in meta.schema_of_primary_key),
            max_versions=getattr(options, "max_version", None),
            time_to_live=getattr(options, "time_to_live", None),
            stream_enabled=stream.enabled,
            stream_id=stream.stream_id,
            expiration_hours=stream.expiration_hours,
            shard_ids=shards,
        )


def _missing_table(name: str, *, stream: bool) -> str:
    flag = " --stream" if stream else ""
    return (
        f"table {name} does not exist in the configured instance (source.endpoint, source.instance); create it: "
        f"cdcbridge table create {name} --pk NAME:TYPE,...{flag}"
    )


def _error_code(error: BaseException) -> str | None:
    if isinstance(error, OTSServiceError):
        return error.get_error_code()
    return getattr(error, "code", None)


def _key_text(primary_key: Any) -> str:
    return ",".join(f"{name}:{kind.lower()}" for name, kind in primary_key)
