"""Delta Lake target (delta-spark): one table per source table under ``apply.delta_path/<table>``.

Layout: the primary-key columns (bigint / string / binary), one typed column per attribute (added when first
seen; see :mod:`.column_types`), ``_versions`` (the cells' versions in ms, which the fold needs for version-aware
operations, kept compact: :mod:`.delta_versions`), ``_seq``, ``_deleted`` and ``_source_ts``. The primary-key names
are kept in the table property ``cdcbridge.primaryKey``.

Each table's rows go in one MERGE with the guard ``s._seq > t._seq OR t._seq IS NULL``, committed with Delta's
``txn`` action (session confs ``spark.databricks.delta.write.txnAppId`` / ``txnVersion``): Delta skips a MERGE
whose (app id, version) it already committed, and :meth:`DeltaTarget.read_marker` reads the same action, so a
re-run batch is a no-op per table. Dead letters are appended to ``<delta_path>/<dead_letter_table>`` under the
same txn. A batch touching several tables is several commits; each is atomic with its own marker, so a batch
cut short between two commits resumes with the tables not yet committed.

On the Spark path (:mod:`cdcbridge.apply.spark.batch`) the table is read in the fold's job: its rows are matched to
the batch's keys on the typed key columns (broadcast) and only those turned into the fold's state by compiled code
(:data:`ROW_STATE`, because Spark interprets the SQL equivalent); the MERGE source is the folded frame itself, and
nothing passes through Python. A batch of few keys (:data:`KEY_FILTER_MAX`) also filters the read by its key values,
so Delta opens only the files whose key statistics may hold them: a trickle adds a file per batch, which a small
batch would otherwise open all of. Otherwise the read hands Delta's reader the version's files itself (their add
actions, kept from the log by :mod:`.delta_key_bounds`, up to :data:`FILES_NAMED_MAX`), and the write by position
and a small table's overwrite commit against those entries: Delta rebuilds a version's state (its file list) with
Spark jobs, and each batch commits a new version.

A batch's cost follows the batch, not the table. Tables are created with deletion vectors
(``delta.enableDeletionVectors``): a MERGE marks the rows it replaces in a bitmap beside their file and writes only
the batch's rows, where copy-on-write rewrites every file holding a changed row, which for random keys is every
file, so the whole table. Files are bounded (:data:`MAX_RECORDS_PER_FILE`, unless the Spark configuration sets
``spark.sql.files.maxRecordsPerFile``) so that what does rewrite files (a table without deletion vectors, OPTIMIZE,
the purge) rewrites bounded ones. A table created before keeps its protocol: the job does not upgrade a table that
other readers share (README: "Delta table layout").

When none of the changed rows is stored (a first load, new keys only: the fold's scan named no file for them in
the version that is still the latest, or the table holds no file), they are appended under the txn marker: what
the MERGE would write, without its scan of the table for the files to rewrite and its join. When the target knows
the marker at the latest version (it committed that version), the append is one commit that does not rebuild the
table's state to look the marker up (:func:`.delta_located_write.append_known`). A batch of new keys may also be
written before it is checked (:meth:`DeltaTarget.pending_append`, :mod:`.delta_pending_append`), into a table that
does not exist yet too: its commit then creates the table (:meth:`DeltaTarget.pending_create`).

A small table is cheaper to rewrite than to MERGE: when the changed rows lie in every file of the version the fold
read (the fold's scan names each row's file) and the table holds at most :data:`OVERWRITE_MAX_BYTES`, it is replaced
by its rows with other keys (keys broadcast) plus the folded rows, under the same txn marker (``mode("overwrite")``;
Delta records the operation as WRITE), which spares the MERGE's scan for the files to touch and its join of every
stored row with the source. The fold already applied the guard to the rows it read, so this happens only while the
table is still at that version, and never for a table that keeps a change data feed (which must record each row's
change). Above the bound no batch replaces the table.

Otherwise, in a table that takes deletion vectors and keeps no change data feed, while it is still at the version
the fold read, the batch is one commit that marks its stored rows deleted where the fold found them (the fold's read
names each row's file and row index) and writes every changed row, new keys too, as new files, under the batch's
marker (:mod:`.delta_located_write`): no scan of the table for the rows to replace, so its cost follows the batch.
The driver's path does the same with the rows :meth:`DeltaTarget.read_rows` located. A table without deletion
vectors, or one another writer committed to meanwhile, is MERGEd as below.

Above the bound, in a table without deletion vectors, while it is still at the version the fold read, the batch is
split by what the fold read: its rows with new keys (the fold named no file for them) are appended first, then its
stored rows are MERGEd with an update clause only, the source broadcast (up to :data:`MERGE_BROADCAST_MAX_ROWS`
rows). A MERGE that also inserts joins source and table with an outer join, so Spark shuffles and sorts the whole
table (a 100k batch into 10M rows: 115 s); with updates only the join is an inner one with the batch broadcast and
the table streamed past it (31 s). The append carries no marker; the MERGE, the last commit, carries it. A batch cut
short between the two is re-run from Kafka: its fold then reads the appended rows as stored at their own seq, so
their operations are stale and only the stored rows are written again.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial, reduce
from typing import TYPE_CHECKING, Any

import numpy as np

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import ColumnValue, PkValue, PrimaryKey, TargetRow
from cdcbridge.apply.errors import TargetError
from cdcbridge.apply.spark.fold import STATE_TYPE, message_key_hash
from cdcbridge.apply.spark.kernel import KernelFunction
from cdcbridge.apply.target import PendingAppend, SparkFoldTarget, TargetBatch
from cdcbridge.apply.targets.column_types import (
    BINARY,
    BOOLEAN,
    DOUBLE,
    LONG,
    RESERVED_COLUMNS,
    STRING,
    TypeCheck,
    check_column_set,
    check_rows,
    quote,
    value_type,
)
from cdcbridge.apply.targets.dead_letters import dead_letter_row
from cdcbridge.apply.targets.delta_build import check_delta_build
from cdcbridge.apply.targets.delta_key_bounds import DeltaKeyBounds, key_bounds
from cdcbridge.apply.targets.delta_key_hashes import KEY_HASHES_MAX, KeyHashes, observed_key_hashes, written_key_hashes
from cdcbridge.apply.targets.delta_located_write import (
    PendingFiles,
    add_files,
    append_known,
    commit_located,
    create_empty,
    overwrite_known,
)
from cdcbridge.apply.targets.delta_pending_append import DeltaPendingAppend, KnownKeys
from cdcbridge.apply.targets.delta_versions import ROW_VERSIONS, cell_version, stored_versions
from cdcbridge.changes import Value

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from cdcbridge.apply.target import FoldedTable

PK_PROPERTY = "cdcbridge.primaryKey"
CHANGE_FEED_PROPERTY = "delta.enableChangeDataFeed"
DELETION_VECTORS_PROPERTY = "delta.enableDeletionVectors"
#: Largest table (bytes of its files) a batch that changes a row in every file replaces instead of MERGEing.
OVERWRITE_MAX_BYTES = 64 * 2**20
#: Most changed rows a MERGE of stored rows only broadcasts (the driver builds the broadcast in its own heap).
MERGE_BROADCAST_MAX_ROWS = 500_000
#: Rows per data file at most: bounded files keep what rewrites files (see the module docstring) bounded too.
MAX_RECORDS_PER_FILE = 1_000_000
#: Most keys whose values filter a read of stored rows (:meth:`DeltaTarget.read_rows`, the fold's read of a batch).
KEY_FILTER_MAX = 1000
#: Most checks of a key against a file's key bounds :meth:`DeltaTarget.read_rows` makes to name the files it reads.
BOUNDS_CHECKS_MAX = 200_000
#: Most files the fold's read names to Delta's reader itself (their add actions, kept from the log), and its write
#: to the commit, instead of a read that rebuilds the table's state with Spark jobs for each new version; each file
#: costs a call into the JVM.
FILES_NAMED_MAX = 500
#: Most keys such a filter names one by one (an OR of their equalities), which Delta prunes files by exactly.
KEY_EQUALITIES_MAX = 64
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
GUARD = "s._seq > t._seq OR t._seq IS NULL"
#: Session settings for many small MERGEs, applied unless the Spark configuration sets them: rebuild a table's
#: snapshot with 2 partitions instead of 50 (a micro-batch table's log is short and checkpointed), and do not
#: materialize the MERGE source (it is a deterministic local frame). No runtime Bloom filters: the job's scans are
#: joins on the primary key, which they do not prune. Data skipping stays on: Delta reads a table with deletion
#: vectors only through the file list it pins (and an error otherwise). Files of at most MAX_RECORDS_PER_FILE rows.
MICRO_BATCH_CONF = {
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.databricks.delta.merge.materializeSource": "none",
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
    "spark.sql.files.maxRecordsPerFile": str(MAX_RECORDS_PER_FILE),
}
#: A stored row as the fold's state, compiled (deploy/spark/src/main/java/io/cdcbridge/spark/RowState.java): its
#: argument is a struct of the attribute columns followed by the RESERVED_COLUMNS.
ROW_STATE = KernelFunction("cdcbridge_row_state", "io.cdcbridge.spark.RowState", STATE_TYPE)
#: The stored rows' file (``_metadata.file_path``), selected before the join with the batch's keys.
_FILE = "_cdcbridge_file"
#: The stored rows' index in their file (``_metadata.row_index``), selected likewise.
_FILE_ROW = "_cdcbridge_file_row"
_POSITION_DDL = "file string, file_row bigint"
_BOOKKEEPING_DDL = "`_versions` map<string,bigint>, `_seq` string, `_deleted` boolean, `_source_ts` bigint"
_DEAD_LETTER_DDL = (
    "app_id string, batch_id bigint, topic string, partition int, offset bigint, error_type string, error string, "
    "message string"
)


@dataclass(frozen=True)
class _TableShape:
    pk: dict[str, str]
    columns: dict[str, str]


@dataclass(frozen=True)
class _RowsRead:
    """What :meth:`DeltaTarget.read_rows` last looked up in a table: the version, the keys, those found and, in
    a table that takes deletion vectors (and keeps no change data feed), where each found row lies (file path,
    row index) for :mod:`.delta_located_write`."""

    version: int
    keys: frozenset[PrimaryKey]
    found: frozenset[PrimaryKey]
    positions: Mapping[PrimaryKey, tuple[str, int]] | None = None
    #: The add actions (JSON) of the files read, when the read named them (:meth:`DeltaTarget._files_frame`).
    adds: tuple[str, ...] | None = None


@dataclass(frozen=True)
class _FoldRead:
    """The table version the fold read a table at, with its file count, its size, whether it keeps a change
    data feed (which must record each row's change, so the table is only ever MERGEd), whether it takes
    deletion vectors and so whether the read locates each row."""

    version: int
    files: int
    size_bytes: int
    change_feed: bool
    deletion_vectors: bool
    #: Whether the batch may be written by the positions the read names (:func:`_writes_by_position`).
    locates_rows: bool
    #: The add actions (JSON) of every file of the version, when the read named them (:data:`FILES_NAMED_MAX`).
    adds: tuple[str, ...] | None = None
    #: The snapshot read (a JVM object).
    snapshot: Any = field(default=None, compare=False, repr=False)


#: Field of the fold's value union (and of the primary-key union) that holds each logical column type.
UNION_FIELD = {BOOLEAN: "z", LONG: "l", DOUBLE: "d", STRING: "s", BINARY: "b"}
_PK_FIELDS = ("l", "s", "b")


class DeltaTarget(SparkFoldTarget):
    """Writes folded rows into Delta tables with MERGE (see the module docstring)."""

    name = "delta"

    def __init__(
        self,
        spark: SparkSession,
        root: str,
        dead_letter_table: str = "_dead_letters",
        overwrite_max_bytes: int = OVERWRITE_MAX_BYTES,
        key_hashes_max: int = KEY_HASHES_MAX,
    ) -> None:
        check_delta_build(spark)
        self.spark = spark
        self.root = root.rstrip("/")
        self.dead_letter_table = dead_letter_table
        self.overwrite_max_bytes = overwrite_max_bytes
        self._shapes: dict[str, _TableShape] = {}
        #: Per table: the shape and the fold-state columns built for it (see :func:`_for_shape`).
        self._state_columns: dict[str, tuple[_TableShape, list[Column]]] = {}
        #: Per table: the shape and the MERGE source's columns built for it (likewise).
        self._source_columns: dict[str, tuple[_TableShape, list[Column]]] = {}
        self._fold_reads: dict[str, _FoldRead] = {}
        self._rows_read: dict[str, _RowsRead] = {}
        #: Per (table path, app id): the table version and the txn marker it holds (see :meth:`read_marker`).
        self._markers: dict[tuple[str, str], tuple[int, BatchMarker | None]] = {}
        self._key_bounds = DeltaKeyBounds(spark)
        #: Per table path: the version of a commit of ours that created it empty, holding no txn marker.
        self._created: dict[str, int] = {}
        self._key_hashes = KeyHashes(key_hashes_max)
        configured = spark.sparkContext.getConf()
        for key, value in MICRO_BATCH_CONF.items():
            if not configured.contains(key):
                spark.conf.set(key, value)

    def path(self, table: str) -> str:
        return f"{self.root}/{table}"

    # --- reading ------------------------------------------------------------------------------------------------

    def _shape(self, table: str) -> _TableShape | None:
        if table in self._shapes:
            return self._shapes[table]
        from delta.tables import DeltaTable

        path = self.path(table)
        if not DeltaTable.isDeltaTable(self.spark, path):
            return None
        detail = DeltaTable.forPath(self.spark, path).detail().select("properties").first()
        properties = detail["properties"] if detail is not None else {}
        if PK_PROPERTY not in (properties or {}):
            raise TargetError(
                f"Delta table at {path} has no {PK_PROPERTY} property, so it was not created by the apply job",
                fix="point apply.delta_path at a folder of its own, or move that table away",
            )
        pk_names = json.loads(properties[PK_PROPERTY])
        schema = self.spark.read.format("delta").load(path).schema
        types = {field.name: field.dataType.simpleString() for field in schema}
        shape = _TableShape(
            {name: types[name] for name in pk_names},
            {name: kind for name, kind in types.items() if name not in pk_names and name not in RESERVED_COLUMNS},
        )
        self._shapes[table] = shape
        return shape

    def pk_names(self, table: str) -> tuple[str, ...] | None:
        shape = self._shape(table)
        return tuple(shape.pk) if shape is not None else None

    def read_marker(self, table: str, app_id: str) -> BatchMarker | None:
        """The table's txn marker of `app_id`. Known without reading the table's state (which costs Spark jobs
        per new table version) while the table is at the version this target last read or committed it at:
        only a writer with the same app id (this job) moves it."""
        path = self.path(table)
        snapshot = self._snapshot(path)
        version = int(snapshot.version())
        if version < 0:
            return None
        known = self._markers.get((path, app_id))
        if known is not None and known[0] == version:
            return known[1]
        txn = snapshot.transactions().get(app_id)
        marker = BatchMarker(app_id, int(txn.get())) if txn.isDefined() else None
        self._markers[(path, app_id)] = (version, marker)
        return marker

    def _committed(self, path: str, marker: BatchMarker) -> None:
        """Note the marker of a commit of ours (or of one Delta skipped as already committed)."""
        self._markers[(path, marker.app_id)] = (int(self._snapshot(path).version()), marker)

    def _known_batch(self, path: str, app_id: str, version: int) -> int | None:
        """The batch id of `app_id`'s marker in the table at `version` (-1: none), if :meth:`read_marker` or a
        commit of ours noted it at that version; None if not known."""
        known = self._markers.get((path, app_id))
        if known is None or known[0] != version:
            return -1 if self._created.get(path) == version else None
        return known[1].batch_id if known[1] is not None else -1

    def _snapshot(self, path: str) -> Any:
        """The table's latest Delta snapshot (a JVM object)."""
        jvm = self.spark._jvm
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self.spark._jsparkSession, path)
        return log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())

    def read_rows(self, table: str, keys: Collection[PrimaryKey]) -> dict[PrimaryKey, TargetRow]:
        """The stored rows of `keys`, read at the table's latest version (noted for :meth:`write`):
        no Spark job when the table holds no file or no file's key bounds cover one of the keys (new keys,
        :mod:`.delta_key_bounds`); else the files whose bounds do, with a key filter (:func:`_with_keys`)."""
        shape = self._shape(table)
        if shape is None or not keys:
            return {}
        from pyspark.sql import functions as F

        path = self.path(table)
        snapshot = self._snapshot(path)
        version = int(snapshot.version())
        locate = _writes_by_position(snapshot.metadata().configuration())
        rows: dict[PrimaryKey, TargetRow] = {}
        positions: dict[PrimaryKey, tuple[str, int]] = {}
        adds: tuple[str, ...] | None = None
        files = self._key_bounds.files(path, snapshot, list(shape.pk))
        holding = files.holding(keys) if len(files.files) * len(keys) <= BOUNDS_CHECKS_MAX else None
        if holding or (holding is None and files.may_hold_any(keys)):
            # The files of the snapshot just taken that may hold the keys, read without the table's state; else
            # the latest version (its state computed once, where `versionAsOf` builds a snapshot of its own), and
            # a commit meanwhile leaves that read unpinned, so it is not noted.
            if holding is not None:
                adds = tuple(files.adds[file] for file in holding)
                stored = self._files_frame(snapshot, adds)
            else:
                stored = self.spark.read.format("delta").load(path)
            place = [F.col(_FILE), F.col(_FILE_ROW)] if locate else []
            if locate:
                stored = stored.select(
                    "*", F.col("_metadata.file_path").alias(_FILE), F.col("_metadata.row_index").alias(_FILE_ROW)
                )
            found = _with_keys(stored, shape, keys, self._json_frame)
            names = [c for c in found.columns if c not in (_FILE, _FILE_ROW)]
            record = F.to_json(F.struct(*[F.col(quote(c)) for c in names]))
            for text, *where in found.select(record, *place).collect():
                row = _row_from_json(table, json.loads(text), shape)
                rows[row.pk] = row
                if where:
                    positions[row.pk] = (where[0], int(where[1]))
            if int(self._snapshot(path).version()) != version:
                self._rows_read.pop(table, None)
                return rows
        read = _RowsRead(version, frozenset(keys), frozenset(rows), positions if locate else None, adds)
        self._rows_read[table] = read
        return rows

    def _files_frame(self, snapshot: Any, adds: Sequence[str]) -> DataFrame:
        """The rows of some files of `snapshot` (their add actions as JSON), deletion vectors applied: Delta's own
        reader over exactly those files, without the table's state, which a read of the table rebuilds with Spark
        jobs for each new version."""
        from pyspark.sql import DataFrame

        jvm = self.spark._jvm
        frame = snapshot.deltaLog().createDataFrame(snapshot, add_files(jvm, adds), False, jvm.scala.Option.empty())
        # Delta builds it in the active session (inside a streaming batch, the batch's own); the target's session
        # holds the compiled functions its frames call.
        frame = jvm.org.apache.spark.sql.classic.Dataset.ofRows(self.spark._jsparkSession, frame.logicalPlan())
        return DataFrame(frame, self.spark)

    def refused_rows(self, table: str, rows: Sequence[TargetRow]) -> dict[PrimaryKey, str]:
        shape = self._shape(table)
        return check_rows(rows, shape.columns if shape else {}, shape.pk if shape else None).refused

    # --- writing ------------------------------------------------------------------------------------------------

    def write(self, batch: TargetBatch) -> int:
        written = 0
        for table, rows in batch.rows.items():
            if rows:
                written += self._merge(table, rows, batch.marker)
        if batch.dead_letters:
            self._append_dead_letters(batch)
        return written

    def _merge(self, table: str, rows: Sequence[TargetRow], marker: BatchMarker) -> int:
        """Write the rows with the guard: appended when none of them is stored (see :meth:`_rows_are_new`),
        else one MERGE."""
        shape = self._evolve(table, rows)
        schema = ", ".join(
            [f"{quote(n)} {k}" for n, k in shape.pk.items()]
            + [f"{quote(n)} {k}" for n, k in shape.columns.items()]
            + [_BOOKKEEPING_DDL]
        )
        source = self._json_frame([_json_row(_row_record(row)) for row in rows], schema)
        latest = self._snapshot(self.path(table))  # one read of the log decides the write mode
        if self._rows_are_new(table, shape, rows, latest):
            self._append(table, source, marker, latest)
        elif not self._replace_read_rows(table, rows, source, marker, latest):
            self._guarded_merge(table, source, shape.pk, marker)
        return len(rows)

    def _replace_read_rows(
        self, table: str, rows: Sequence[TargetRow], source: DataFrame, marker: BatchMarker, latest: Any
    ) -> bool:
        """Write `rows` by position (:mod:`.delta_located_write`) when :meth:`read_rows` located every stored one
        of them in the version that is still the latest (`latest`: the table's latest snapshot); False when it did
        not (nothing written)."""
        read = self._rows_read.get(table)
        if read is None or read.positions is None or any(row.pk not in read.keys for row in rows):
            return False
        if read.version != int(latest.version()):
            return False
        places = [read.positions[row.pk] for row in rows if row.pk in read.found]
        located = self._json_frame([json.dumps({"file": f, "file_row": n}) for f, n in places], _POSITION_DDL)
        files = {file for file, _ in places}
        inserted = len(rows) - len(places)
        return self._commit_by_position(table, read.version, source, located, marker, files, inserted, read.adds)

    def _rows_are_new(self, table: str, shape: _TableShape, rows: Sequence[TargetRow], latest: Any) -> bool:
        """Whether the table holds none of the rows' keys: it holds no file, or :meth:`read_rows` looked all of
        them up in the version that is still the latest (`latest`) and found none. Then an append writes what the
        MERGE would, without the MERGE's scan of the table and its join."""
        read = self._rows_read.get(table)
        if (
            read is not None
            and read.version == int(latest.version())
            and not read.found
            and all(row.pk in read.keys for row in rows)
        ):
            return True
        return not self._key_bounds.files(self.path(table), latest, list(shape.pk)).files

    def _evolve(self, table: str, rows: Sequence[TargetRow]) -> _TableShape:
        """Create the table or add the batch's new columns (rows were checked by refused_rows)."""

        shape = self._shape(table)
        check = check_rows(rows, shape.columns if shape else {}, shape.pk if shape else None)
        if check.refused:
            raise TargetError(f"rows of table {table!r} reached the write despite type conflicts: {check.refused}")
        pk = {name: value_type(value) for name, value in rows[0].pk}
        return self._ensure_shape(table, pk, check.new_columns)

    def _ensure_shape(self, table: str, pk: Mapping[str, str], new_columns: Mapping[str, str]) -> _TableShape:
        """Create the table with primary key `pk` (name → type) if it does not exist, and add `new_columns`."""
        shape = self._shape(table)
        path = self.path(table)
        if shape is None:
            created = _TableShape(dict(pk), dict(new_columns))
            version = create_empty(self.spark, path, _table_ddl(created), _table_properties(created))
            if version is not None:  # else another writer created it meanwhile
                self._created[path] = version
                self._key_hashes.start(path, version)
        elif new_columns:
            added = ", ".join(f"{quote(n)} {k}" for n, k in new_columns.items())
            self.spark.sql(f"ALTER TABLE delta.{quote(path)} ADD COLUMNS ({added})")
        else:
            return shape
        self._shapes.pop(table, None)
        refreshed = self._shape(table)
        assert refreshed is not None
        return refreshed

    # --- the Spark path -----------------------------------------------------------------------------------------

    def create_table(self, table: str, pk: Mapping[str, str], columns: Mapping[str, str]) -> str:
        """Create `table` as the job would for its first rows (primary key and attribute columns, name → Spark
        type), or add the missing columns; returns its path. For tools that fill a table directly."""
        self._ensure_shape(table, pk, {name: kind for name, kind in columns.items() if name not in pk})
        return self.path(table)

    def current_rows(
        self, tables: Collection[str], grouped: DataFrame, keys_at_most: int | None = None
    ) -> DataFrame | None:
        """The fold's stored rows; a batch of at most :data:`KEY_FILTER_MAX` keys reads only the tables it names,
        each with a filter on its key values that Delta skips files by (:func:`_stored_keys_filter`). A batch
        known to hold more messages than that is not asked for its keys: their collect runs the grouping
        before the fold's job, which costs a large batch more than the filter could save it."""
        shapes = {table: shape for table in tables if (shape := self._shape(table)) is not None}
        few_possible = shapes and (keys_at_most is None or keys_at_most <= KEY_FILTER_MAX)
        few = _few_batch_keys(shapes, grouped) if few_possible else None
        frames = [
            self._state_frame(table, shape, grouped, None if few is None else few[table])
            for table, shape in shapes.items()
            if few is None or table in few
        ]
        return _union_all(frames)

    def _state_frame(
        self, table: str, shape: _TableShape, grouped: DataFrame, keys: Collection[tuple[Any, ...]] | None
    ) -> DataFrame:
        """The table's rows with the keys of `grouped` as the fold's state: ``table``, ``pk``, ``cur``, ``file``,
        ``file_row``. Matched on the typed key columns before the conversion, so only the batch's rows are
        converted; `keys` (the batch's typed keys, if few) filter the read too (:func:`_stored_keys_filter`), so
        Delta reads only the files whose statistics may hold them (a trickle's table grows a file per batch)."""
        from pyspark.sql import functions as F

        columns = _for_shape(self._state_columns, table, shape, partial(self._new_state_columns, table))
        read = self._note_fold_read(table, shape)
        # Delta names a row's index in its file only in a table that takes deletion vectors.
        file_row = F.col("_metadata.row_index") if read.deletion_vectors else F.lit(None).cast("bigint")
        if keys is None and read.adds:
            stored = self._files_frame(read.snapshot, read.adds)
        else:
            stored = self.spark.read.format("delta").load(self.path(table))
        if keys is not None:
            stored = stored.where(_stored_keys_filter(shape, keys))
        stored = stored.select("*", F.col("_metadata.file_path").alias(_FILE), file_row.alias(_FILE_ROW))
        keys = F.broadcast(grouped.where(F.col("table") == F.lit(table)).select(*_batch_key_columns(shape)))
        return stored.join(keys, on=list(shape.pk), how="left_semi").select(*columns)

    def _note_fold_read(self, table: str, shape: _TableShape) -> _FoldRead:
        """Note the version the fold reads the table at, with its file count and size (from the key bounds' file
        list: no Spark job) and whether it keeps a change data feed."""
        path = self.path(table)
        snapshot = self._snapshot(path)
        files = self._key_bounds.files(path, snapshot, list(shape.pk))
        configuration = snapshot.metadata().configuration()
        read = _FoldRead(
            version=int(snapshot.version()),
            files=len(files.files),
            size_bytes=files.size_bytes,
            change_feed=_enabled(configuration, CHANGE_FEED_PROPERTY),
            deletion_vectors=_enabled(configuration, DELETION_VECTORS_PROPERTY),
            locates_rows=_writes_by_position(configuration),
            adds=tuple(files.adds.values()) if len(files.adds) <= FILES_NAMED_MAX else None,
            snapshot=snapshot,
        )
        self._fold_reads[table] = read
        return read

    def stored_among(self, tables: Collection[str], keys: DataFrame) -> DataFrame | None:
        """The batch's keys the tables hold, matched on the key columns alone (no row is converted): the batch's
        keys broadcast and the table's key columns streamed past them, as the fold's read does, so a large table
        is not shuffled."""
        from pyspark.sql import functions as F

        frames = []
        for table in tables:
            shape = self._shape(table)
            if shape is None or self._note_fold_read(table, shape).files == 0:
                continue
            stored = self.spark.read.format("delta").load(self.path(table)).select(*[F.col(quote(n)) for n in shape.pk])
            batch = F.broadcast(keys.where(F.col("table") == F.lit(table)).select(*_batch_key_columns(shape)))
            frames.append(stored.join(batch, on=list(shape.pk), how="left_semi").select(F.lit(table).alias("table")))
        return _union_all(frames)

    def _new_state_columns(self, table: str, shape: _TableShape) -> list[Column]:
        ROW_STATE.register(self.spark)
        return _state_columns(table, shape)

    def refusal(self, folded: FoldedTable) -> str | None:
        if folded.case_conflicts:
            return f"{folded.case_conflicts} row(s) have attribute columns that differ only in case"
        check = _column_check(self._shape(folded.table), folded)
        return check if isinstance(check, str) else None

    def write_folded(self, marker: BatchMarker, tables: Mapping[str, FoldedTable]) -> dict[str, int]:

        written: dict[str, int] = {}
        for table, folded in tables.items():
            check = _column_check(self._shape(table), folded)
            if isinstance(check, str):
                raise TargetError(f"rows of table {table!r} reached the write despite a type conflict: {check}")
            pk = dict(next(iter(folded.pk_signatures)))
            shape = self._ensure_shape(table, pk, check.new_columns)
            source = self._source(table, shape, folded.rows)
            latest = self._snapshot(self.path(table))  # one read of the log decides the write mode
            if self._only_new_rows(folded, latest):
                self._append(table, source, marker, latest)
            elif self._overwrite_is_cheaper(folded, latest):
                self._overwrite(table, source, shape.pk, marker, self._fold_reads[table])
            elif self._replace_located(folded, latest, source, marker):
                pass
            elif self._split_by_stored_rows(folded, latest):
                self._append_new_then_merge_stored(table, folded, shape, marker)
            else:
                self._guarded_merge(table, source, shape.pk, marker)
            written[table] = folded.rows_changed
        return written

    def _only_new_rows(self, folded: FoldedTable, latest: Any) -> bool:
        """Whether none of the changed rows is stored: the fold read none of them (it names no file) in the
        table version that is still the latest, or the table holds no file at all (new or empty). Then a plain
        append writes what the MERGE would, without its scan of the table and its join. `latest`: the table's
        latest snapshot."""
        shape = self._shape(folded.table)
        if shape is not None and not self._key_bounds.files(self.path(folded.table), latest, list(shape.pk)).files:
            return True
        read = self._fold_reads.get(folded.table)
        return read is not None and not folded.files and int(latest.version()) == read.version

    def _append(self, table: str, source: DataFrame, marker: BatchMarker, latest: Any) -> None:
        """Append `source` (rows with keys the table does not hold) under the batch's txn marker; skipped if the
        marker is committed already, as a MERGE is. One commit without the table's state
        (:func:`.delta_located_write.append_known`) when the marker at the latest version (`latest`: the snapshot
        the caller decided by, not read again) is known."""
        path = self.path(table)
        version = int(latest.version())
        known = self._known_batch(path, marker.app_id, version)
        if known is not None:
            observation = None
            if known < marker.batch_id and self._key_hashes.at(path, version) is not None:
                shape = self._shape(table)
                assert shape is not None
                source, observation = observed_key_hashes(source, _message_key_hash(table, shape))
            committed = append_known(self.spark, path, version, source, marker, known)
            if committed is not None:
                self._markers[(path, marker.app_id)] = (committed, marker)
                if observation is not None:
                    self._key_hashes.appended(path, version, committed, written_key_hashes(observation))
                return
        (
            source.write.format("delta")
            .mode("append")
            .option("txnAppId", marker.app_id)
            .option("txnVersion", marker.batch_id)
            .save(self.path(table))
        )
        self._committed(self.path(table), marker)

    def pending_append(self, table: str, rows: DataFrame, key_hashes: Callable[[], np.ndarray]) -> PendingAppend | None:
        from pyspark.sql import functions as F

        shape = self._shape(table)
        if shape is None:
            return None
        path = self.path(table)
        snapshot = self._snapshot(path)
        read_version = int(snapshot.version())
        table_files = self._key_bounds.files(path, snapshot, list(shape.pk))
        if not table_files.files and self._key_hashes.at(path, read_version) is None:
            self._key_hashes.start(path, read_version)
        source = self._source(table, shape, rows)
        # A row whose key the table cannot take is left out, not failed on: the batch's observed key signatures
        # then send it to the other paths (DeltaPendingAppend.written_in_full).
        source = source.where(_all_of([F.col(quote(name)).isNotNull() for name in shape.pk]))
        files = PendingFiles.write(self.spark, path, read_version, source)
        if files is None:
            return None
        stored_hashes = self._key_hashes.at(path, read_version)
        known = None if stored_hashes is None else KnownKeys(stored_hashes, key_hashes())
        stored = None
        if known is None:
            written = [key_bounds(stats, list(shape.pk)) for stats in files.stats]
            adds = [table_files.adds[file] for file in table_files.overlapping(written)]
            stored = self._files_frame(snapshot, adds) if adds else None

        def committed(marker: BatchMarker, version: int) -> None:
            self._markers[(path, marker.app_id)] = (version, marker)
            if known is not None:
                self._key_hashes.appended(path, read_version, version, known.written)

        return DeltaPendingAppend(
            self.spark, shape.pk, files, stored=stored, known=known, takes=self._takes_as_written,
            committed=committed,
        )  # fmt: skip

    def creates_when_written_first(self, table: str) -> bool:
        return self._shape(table) is None

    def pending_create(
        self,
        table: str,
        rows: DataFrame,
        key_hashes: Callable[[], np.ndarray],
        columns: frozenset[tuple[str, str]],
        pk_signatures: frozenset[tuple[tuple[str, str], ...]],
    ) -> PendingAppend | None:
        """The table's first rows written in the shape the sample shows, as :meth:`_ensure_shape` would create it;
        the commit creates the table with them (one commit, one pass over the batch, instead of a CREATE after a
        job that finds the batch's shape). The job then knows every key the table holds (:mod:`.delta_key_hashes`)."""
        from pyspark.sql import functions as F

        check = check_column_set(columns, {}, None, pk_signatures)
        if isinstance(check, str) or len(pk_signatures) != 1:
            return None
        shape = _TableShape(dict(next(iter(pk_signatures))), dict(check.new_columns))
        path = self.path(table)
        source = self._source(table, shape, rows)
        source = source.where(_all_of([F.col(quote(name)).isNotNull() for name in shape.pk]))
        files = PendingFiles.create(self.spark, path, _table_ddl(shape), _table_properties(shape), source)
        if files is None:
            return None
        written = key_hashes()

        def committed(marker: BatchMarker, version: int) -> None:
            self._markers[(path, marker.app_id)] = (version, marker)
            self._shapes[table] = shape
            self._key_hashes.start(path, version - 1)
            self._key_hashes.appended(path, version - 1, version, written)

        return DeltaPendingAppend(
            self.spark, shape.pk, files, stored=None, known=KnownKeys(np.empty(0, dtype=np.int64), written),
            takes=partial(_shape_takes, shape), committed=committed,
        )  # fmt: skip

    def _source(self, table: str, shape: _TableShape, rows: DataFrame) -> DataFrame:
        """Folded rows (``pk``, ``row``) as the table's typed columns, ready to be written."""
        ROW_VERSIONS.register(rows.sparkSession)
        return rows.select(*_for_shape(self._source_columns, table, shape, _merge_source_columns))

    def _takes_as_written(self, folded: FoldedTable) -> bool:
        """Whether the table's current columns take every changed row of `folded` as it is."""
        shape = self._shape(folded.table)
        return shape is not None and _shape_takes(shape, folded)

    def _overwrite_is_cheaper(self, folded: FoldedTable, latest: Any) -> bool:
        """Whether the changed rows lie in every file of the table version the fold read, that table is small
        (at most `overwrite_max_bytes`), and it is still at that version (so the fold saw every row it replaces)."""
        read = self._fold_reads.get(folded.table)
        if read is None or read.change_feed or read.files == 0 or len(folded.files) < read.files:
            return False
        if read.size_bytes > self.overwrite_max_bytes:
            return False
        return int(latest.version()) == read.version

    def _replace_located(self, folded: FoldedTable, latest: Any, source: DataFrame, marker: BatchMarker) -> bool:
        """Mark the changed stored rows deleted where the fold read them and write all changed rows, in one
        commit under the batch's marker, if the fold's read located them (the table takes deletion vectors and
        keeps no change data feed) and the table is still at that version; False if not (nothing written)."""
        from pyspark.sql import functions as F

        read = self._fold_reads.get(folded.table)
        if read is None or not read.locates_rows or int(latest.version()) != read.version:
            return False
        located = folded.rows.where(F.col("file").isNotNull())
        return self._commit_by_position(folded.table, read.version, source, located, marker, folded.files,
                                        folded.rows_new, read.adds)  # fmt: skip

    def _commit_by_position(
        self,
        table: str,
        version: int,
        source: DataFrame,
        located: DataFrame,
        marker: BatchMarker,
        files: Collection[str],
        inserted: int,
        adds: Collection[str] | None = None,
    ) -> bool:
        """One commit by position (:func:`.delta_located_write.commit_located`; `adds`: the add actions of the
        files read, if known), noted as ours when written."""
        path = self.path(table)
        if not commit_located(
            self.spark, path, version, source, located, marker, files=files, inserted=inserted, adds=adds,
            committed_batch=self._known_batch(path, marker.app_id, version),
        ):  # fmt: skip
            return False
        self._committed(path, marker)
        return True

    def _split_by_stored_rows(self, folded: FoldedTable, latest: Any) -> bool:
        """Whether the batch is written as an append of its new rows and an update-only MERGE of its stored ones:
        the table is above the overwrite bound (a large one, which the MERGE's outer join would shuffle whole) and
        still at the version the fold read, so the rows the fold found no file for are still new."""
        read = self._fold_reads.get(folded.table)
        if read is None or read.size_bytes <= self.overwrite_max_bytes:
            return False
        return int(latest.version()) == read.version

    def _append_new_then_merge_stored(
        self, table: str, folded: FoldedTable, shape: _TableShape, marker: BatchMarker
    ) -> None:
        """Append the folded rows with new keys (no file), then MERGE the stored ones (update only, under the
        batch's marker, the source broadcast when small enough); see the module docstring for why and for a batch
        cut short between the two commits."""
        from pyspark.sql import functions as F

        new = self._source(table, shape, folded.rows.where(F.col("file").isNull()))
        if not new.isEmpty():
            new.write.format("delta").mode("append").save(self.path(table))
        stored = self._source(table, shape, folded.rows.where(F.col("file").isNotNull()))
        if folded.rows_changed <= MERGE_BROADCAST_MAX_ROWS:
            stored = F.broadcast(stored)
        self._guarded_merge(table, stored, shape.pk, marker, insert=False)

    def _append_dead_letters(self, batch: TargetBatch) -> None:
        rows = [_json_row(dead_letter_row(letter, batch.marker)) for letter in batch.dead_letters]
        (
            self._json_frame(rows, _DEAD_LETTER_DDL)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", batch.marker.app_id)
            .option("txnVersion", batch.marker.batch_id)
            .save(self.path(self.dead_letter_table))
        )

    def purge_deleted(self, table: str, horizon_ms: int) -> int:
        from delta.tables import DeltaTable

        if self._shape(table) is None:
            return 0
        delta_table = DeltaTable.forPath(self.spark, self.path(table))
        delta_table.delete(f"_deleted AND _source_ts < {int(horizon_ms)}")
        metrics = delta_table.history(1).select("operationMetrics").first()
        return int((metrics["operationMetrics"] or {}).get("numDeletedRows", 0)) if metrics else 0

    # --- helpers ------------------------------------------------------------------------------------------------

    def _guarded_merge(
        self, table: str, source: DataFrame, pk: Iterable[str], marker: BatchMarker, *, insert: bool = True
    ) -> None:
        """MERGE `source` into the table by primary key, updating only where the guard says the source is newer
        (and inserting the rows it does not hold, unless `insert` is off), committed with the batch's txn marker."""
        from delta.tables import DeltaTable

        on = " AND ".join(f"t.{quote(name)} = s.{quote(name)}" for name in pk)
        with self._txn(marker):
            merge = (
                DeltaTable.forPath(self.spark, self.path(table))
                .alias("t")
                .merge(source.alias("s"), on)
                .whenMatchedUpdateAll(condition=GUARD)
            )
            (merge.whenNotMatchedInsertAll() if insert else merge).execute()
        self._committed(self.path(table), marker)

    def _overwrite(
        self, table: str, source: DataFrame, pk: Iterable[str], marker: BatchMarker, read: _FoldRead | None = None
    ) -> None:
        """Replace the table with its rows not in `source` plus `source`, committed with the batch's txn marker:
        what the MERGE writes when the batch changes a row in every file, without the MERGE's scan for the
        files to rewrite and its join of every stored row with the source (the keys are broadcast instead).
        Only after :meth:`_overwrite_is_cheaper`: `source` was folded onto the rows this version holds. When the
        fold's `read` named the version's files, the table's state is not rebuilt to read or replace them
        (:func:`.delta_located_write.overwrite_known`)."""
        from pyspark.sql import functions as F

        names = list(pk)
        path = self.path(table)
        named = read is not None and read.adds
        stored = self._files_frame(read.snapshot, read.adds) if named else self.spark.read.format("delta").load(path)
        kept = stored.join(F.broadcast(source.select(*[F.col(quote(n)) for n in names])), on=names, how="left_anti")
        if named:
            committed = overwrite_known(
                self.spark, path, read.version, kept.unionByName(source), marker, adds=read.adds,
                committed_batch=self._known_batch(path, marker.app_id, read.version),
            )  # fmt: skip
            if committed is None:  # another writer committed since the fold's read: the guard decides per row
                self._guarded_merge(table, source, names, marker)
            else:
                self._markers[(path, marker.app_id)] = (committed, marker)
            return
        (
            kept.unionByName(source)
            .write.format("delta")
            .mode("overwrite")
            .option("txnAppId", marker.app_id)
            .option("txnVersion", marker.batch_id)
            .save(self.path(table))
        )
        self._committed(self.path(table), marker)

    @contextmanager
    def _txn(self, marker: BatchMarker) -> Iterator[None]:
        conf = self.spark.conf
        conf.set(TXN_APP_ID, marker.app_id)
        conf.set(TXN_VERSION, str(marker.batch_id))
        try:
            yield
        finally:
            conf.unset(TXN_APP_ID)
            conf.unset(TXN_VERSION)

    def _json_frame(self, rows: list[str], ddl: str) -> DataFrame:
        """A DataFrame of `ddl` from JSON texts: Spark parses JSON in the JVM much faster than it converts
        Python rows."""
        from pyspark.sql import functions as F

        frame = self.spark.createDataFrame([(text,) for text in rows], "j string")
        return frame.select(F.from_json("j", ddl).alias("r")).select("r.*")


def _table_ddl(shape: _TableShape) -> str:
    """The columns of a table the job creates: the primary key, the attributes, the bookkeeping."""
    return ", ".join(
        [f"{quote(n)} {k} NOT NULL" for n, k in shape.pk.items()]
        + [f"{quote(n)} {k}" for n, k in shape.columns.items()]
        + [_BOOKKEEPING_DDL]
    )


def _table_properties(shape: _TableShape) -> dict[str, str]:
    """The properties of a table the job creates: its primary key's names, deletion vectors on."""
    return {PK_PROPERTY: json.dumps(list(shape.pk)), DELETION_VECTORS_PROPERTY: "true"}


def _shape_takes(shape: _TableShape, folded: FoldedTable) -> bool:
    """Whether a table of `shape` takes every changed row of `folded` as it is: nothing :meth:`DeltaTarget.refusal`
    names, no column to add."""
    check = _column_check(shape, folded)
    return not folded.case_conflicts and not isinstance(check, str) and not check.new_columns


def _column_check(shape: _TableShape | None, folded: FoldedTable) -> TypeCheck | str:
    """`folded`'s columns and key against a table of `shape` (None: no table yet): the columns to add, or why not."""
    return check_column_set(
        folded.columns, shape.columns if shape else {}, shape.pk if shape else None, folded.pk_signatures
    )


def _writes_by_position(configuration: Any) -> bool:
    """Whether a batch may replace the table's stored rows by position (:mod:`.delta_located_write`): the table
    takes deletion vectors and keeps no change data feed (which must record each row's change, so only a MERGE
    writes it)."""
    return _enabled(configuration, DELETION_VECTORS_PROPERTY) and not _enabled(configuration, CHANGE_FEED_PROPERTY)


def _enabled(configuration: Any, name: str) -> bool:
    """Whether the table property `name` is set to true (`configuration`: the table metadata's, a Scala map)."""
    value = configuration.get(name)
    return bool(value.isDefined()) and str(value.get()).lower() == "true"


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")
    return value


def _json_row(record: Mapping[str, Any]) -> str:
    return json.dumps({name: _json_value(value) for name, value in record.items()}, allow_nan=False)


def _row_record(row: TargetRow) -> dict[str, Any]:
    record: dict[str, Any] = dict(row.pk)
    for name, cell in row.columns.items():
        record[name] = cell.value
    record["_versions"] = stored_versions(row.columns)
    record["_seq"] = row.seq
    record["_deleted"] = row.deleted
    record["_source_ts"] = row.source_ts
    return record


def _typed(value: Any, kind: str) -> Value:
    if kind == BINARY:
        return base64.b64decode(value)
    if kind == DOUBLE:
        return float(value)
    return value


def _row_from_json(table: str, record: Mapping[str, Any], shape: _TableShape) -> TargetRow:
    pk: list[tuple[str, PkValue]] = []
    for name, kind in shape.pk.items():
        value = _typed(record[name], kind)
        assert isinstance(value, int | str | bytes)
        pk.append((name, value))
    versions = record.get("_versions") or {}
    columns = {
        name: ColumnValue(_typed(record[name], kind), cell_version(versions, name))
        for name, kind in shape.columns.items()
        if record.get(name) is not None
    }
    return TargetRow(
        table=table,
        pk=tuple(pk),
        columns=columns,
        seq=record.get("_seq"),
        deleted=bool(record.get("_deleted")),
        source_ts=record.get("_source_ts"),
    )


def _union_all(frames: Sequence[DataFrame]) -> DataFrame | None:
    """The frames' rows in one frame (by column name); None for no frame."""
    if not frames:
        return None
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def _union(column: Column, kind: str, fields: tuple[str, ...]) -> Column:
    """A typed column as the fold's union struct (`fields` in order, the one of `kind` set)."""
    from pyspark.sql import functions as F

    wanted = UNION_FIELD[kind]
    types = {"z": BOOLEAN, "l": LONG, "d": DOUBLE, "s": STRING, "b": BINARY}
    return F.struct(*[(column if name == wanted else F.lit(None).cast(types[name])).alias(name) for name in fields])


def _with_keys(
    stored: DataFrame, shape: _TableShape, keys: Collection[PrimaryKey], frame: Callable[[list[str], str], DataFrame]
) -> DataFrame:
    """The rows of `stored` whose key is one of `keys`: a filter Delta skips files by (:func:`_stored_keys_filter`)
    where it names exactly those keys (a one-column key, or few keys), else a join with the keys as a frame
    (`frame`: JSON texts, DDL)."""
    if len(keys) <= KEY_FILTER_MAX and (len(shape.pk) == 1 or len(keys) <= KEY_EQUALITIES_MAX):
        typed = [tuple(_typed_key(dict(pk).get(name), kind) for name, kind in shape.pk.items()) for pk in keys]
        return stored.where(_stored_keys_filter(shape, typed))
    pk_schema = ", ".join(f"{quote(name)} {kind}" for name, kind in shape.pk.items())
    wanted = frame([_json_row(dict(pk)) for pk in keys], pk_schema)
    return stored.join(wanted, on=list(shape.pk), how="inner")


def _few_batch_keys(shapes: Mapping[str, _TableShape], grouped: DataFrame) -> dict[str, list[tuple[Any, ...]]] | None:
    """The batch's row keys per table of `shapes` as typed key values (:func:`_typed_batch_key`), read with one
    small collect of the persisted grouping; None when there are more than :data:`KEY_FILTER_MAX`."""
    from pyspark.sql import functions as F

    rows = grouped.where(F.col("table").isNotNull()).select("table", "pk").limit(KEY_FILTER_MAX + 1).collect()
    if len(rows) > KEY_FILTER_MAX:
        return None
    keys: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        shape = shapes.get(row["table"])
        if shape is not None:
            keys.setdefault(row["table"], []).append(_typed_batch_key(shape, row["pk"]))
    return keys


def _typed_batch_key(shape: _TableShape, pk: Sequence[Any]) -> tuple[Any, ...]:
    """A collected grouped ``pk`` (name and value-union items) as the table's typed key values; a key of other
    names or types comes out with a None (it matches no stored row, as in :func:`_batch_key_columns`)."""
    if len(pk) != len(shape.pk):
        return (None,)
    return tuple(_typed_key(_collected(item["v"][UNION_FIELD[kind]]), kind) if item["n"] == name else None
                 for item, (name, kind) in zip(pk, shape.pk.items(), strict=True))  # fmt: skip


def _stored_keys_filter(shape: _TableShape, keys: Collection[tuple[Any, ...]]) -> Column:
    """A filter that holds at least the stored rows of `keys` (typed key values in the key's column order; one with
    a None matches no stored row and adds nothing) and that Delta prunes files by, with each file's key statistics:
    up to :data:`KEY_EQUALITIES_MAX` keys an OR of each key's equalities (file by file, and exactly those keys),
    more as each key column's IN list (Delta prunes an IN list by its range only; exact for a one-column key)."""
    from pyspark.sql import functions as F

    typed = list(dict.fromkeys(key for key in keys if all(value is not None for value in key)))
    if not typed:
        return F.lit(False)
    names = [quote(name) for name in shape.pk]
    if len(typed) <= KEY_EQUALITIES_MAX:
        equalities = [_all_of([F.col(n) == F.lit(v) for n, v in zip(names, key, strict=True)]) for key in typed]
        return _any_of(equalities)
    return _all_of([F.col(n).isin(sorted({key[i] for key in typed}, key=repr)) for i, n in enumerate(names)])


def _all_of(conditions: Sequence[Column]) -> Column:
    return reduce(lambda left, right: left & right, conditions)


def _any_of(conditions: Sequence[Column]) -> Column:
    """The conditions OR-ed as a balanced tree, so that a long list does not nest deeply."""
    while len(conditions) > 1:
        pairs = range(0, len(conditions), 2)
        conditions = [conditions[i] | conditions[i + 1] if i + 1 < len(conditions) else conditions[i] for i in pairs]
    return conditions[0]


def _collected(value: Any) -> Any:
    """A value as collected from Spark in the types the target's keys use (PySpark collects binary as bytearray)."""
    return bytes(value) if isinstance(value, bytearray) else value


def _typed_key(value: PkValue | None, kind: str) -> PkValue | None:
    """A key value as the key column compares it; a value of another type matches no row (None)."""
    wanted = {LONG: int, STRING: str, BINARY: bytes}.get(kind)
    if wanted is None or isinstance(value, bool) or not isinstance(value, wanted):
        return None
    return value


def _batch_key_columns(shape: _TableShape) -> list[Column]:
    """The batch's row keys (grouped operations' ``pk``) as the table's typed key columns; a key of other names
    or types comes out null somewhere and matches no stored row."""
    from pyspark.sql import functions as F

    columns = []
    for index, (name, kind) in enumerate(shape.pk.items()):
        item = F.col("pk")[index]
        right = (F.size("pk") == len(shape.pk)) & (item["n"] == F.lit(name))
        columns.append(F.when(right, item["v"][UNION_FIELD[kind]]).alias(name))
    return columns


def _state_columns(table: str, shape: _TableShape) -> list[Column]:
    """The columns that turn a table's rows into the fold's state (``table``, ``pk``, ``cur``; the state by
    compiled code, :data:`ROW_STATE`) and name the file holding each (``file``, selected as ``_file`` before
    the rows are matched to the batch's keys)."""
    from pyspark.sql import functions as F

    pk = _message_pk(shape)
    stored = F.struct(*[F.col(quote(name)) for name in [*shape.columns, *RESERVED_COLUMNS]])
    return [
        F.lit(table).alias("table"),
        pk.alias("pk"),
        ROW_STATE(stored).alias("cur"),
        F.col(_FILE).alias("file"),
        F.col(_FILE_ROW).alias("file_row"),
    ]


def _message_pk(shape: _TableShape) -> Column:
    """A row's typed key columns as the messages hold its key (``pk``: list of name and value union)."""
    from pyspark.sql import functions as F

    return F.array(
        *[F.struct(F.lit(n).alias("n"), _union(F.col(quote(n)), kind, _PK_FIELDS).alias("v"))
          for n, kind in shape.pk.items()]
    )  # fmt: skip


def _message_key_hash(table: str, shape: _TableShape) -> Column:
    """The hash of a row's key from its typed key columns, equal to its messages' (:func:`message_key_hash`)."""
    from pyspark.sql import functions as F

    return message_key_hash(F.lit(table), _message_pk(shape))


def _merge_source_columns(shape: _TableShape) -> list[Column]:
    """The columns that turn folded rows (``pk``, ``row``) into the table's typed columns, ready for the MERGE."""
    from pyspark.sql import functions as F

    pk = [F.col("pk")[i]["v"][UNION_FIELD[kind]].alias(name) for i, (name, kind) in enumerate(shape.pk.items())]
    cells = F.col("row.cols")
    columns = [cells.getItem(name)["v"][UNION_FIELD[kind]].alias(name) for name, kind in shape.columns.items()]
    return [
        *pk,
        *columns,
        ROW_VERSIONS(F.col("row.cols")).alias("_versions"),
        F.col("row.seq").alias("_seq"),
        F.col("row.del").alias("_deleted"),
        F.col("row.ts").alias("_source_ts"),
    ]


def _for_shape(
    cache: dict[str, tuple[_TableShape, list[Column]]],
    table: str,
    shape: _TableShape,
    build: Callable[[_TableShape], list[Column]],
) -> list[Column]:
    """The columns built for the table's `shape`, kept across batches (building them is hundreds of JVM calls;
    a new shape object, after a schema change, builds them again)."""
    cached = cache.get(table)
    if cached is None or cached[0] is not shape:
        cached = (shape, build(shape))
        cache[table] = cached
    return cached[1]
