"""One Delta commit that replaces rows whose place the job already knows: deletion vectors mark the stored rows'
positions, the batch's rows are written as new files, and the batch's txn marker goes in the same commit.

Why: a MERGE finds the rows it replaces by joining the batch with every file the batch's keys may lie in, which
for random keys is a scan of the whole table, although the job's own read of those rows has just named each one's
file and row index (``_metadata.file_path``, ``_metadata.row_index``). Delta has no public API that deletes rows
by position, so this takes the internal steps of Delta's own DELETE with deletion vectors (the bitmaps built from
a frame of file and row index, merged with each file's current vector, and the files' new log entries), pinned
with delta-spark in pyproject.toml; ``tests/integration/apply/test_delta_located_write.py`` holds them to the
reference path.

A caller that knows the located files' add actions (the driver's path, from the log) passes them: the commit then
makes those files' new entries itself and reads nothing of the table's state, which Delta's own step would rebuild
with Spark jobs for each new version.

The transaction reads the whole table and must start at the version the rows were located in, so a commit of
another writer before it means no write here (the caller MERGEs) and one during it fails the commit as a
conflict, instead of marking rows that moved.

An append of new rows under a marker the caller knows (:func:`append_known`) takes the same transaction's steps, for
the same reason: a DataFrame append with ``txnAppId`` looks the marker up in the table's state. So does the
replacement of a small table's every file (:func:`overwrite_known`): a DataFrame overwrite lists the files it
removes from that state.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from cdcbridge.apply.targets.column_types import quote

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcbridge.apply.core.marker import BatchMarker

#: The columns Delta's deletion-vector builder reads (``DeletionVectorBitmapGenerator``): the file as
#: ``_metadata.file_path`` names it, the file's current vector (serialized descriptor, null for none), the row.
_FILE_COLUMN = "filePath"
_VECTOR_COLUMN = "deletionVectorId"
_ROW_COLUMN = "rowIndexCol"
#: The counts of the rows and files a commit marked, as Delta's ``processUnmodifiedData`` names them.
_MARK_COUNTS = (
    "numModifiedRows",
    "numRemovedFiles",
    "numDeletionVectorsAdded",
    "numDeletionVectorsRemoved",
    "numDeletionVectorsUpdated",
)
#: The matched clause's action in the table's history (``operationParameters.matchedPredicates``).
MATCHED_ACTION = "update by position"


def commit_located(
    spark: SparkSession,
    path: str,
    read_version: int,
    rows: DataFrame,
    located: DataFrame,
    marker: BatchMarker,
    *,
    files: Collection[str],
    inserted: int,
    adds: Collection[str] | None = None,
    committed_batch: int | None = None,
) -> bool:
    """Replace the rows at `located` (``file``: ``_metadata.file_path``, ``file_row``: ``_metadata.row_index``,
    read at table version `read_version`; `files`: the distinct files) with `rows` (the table's columns;
    `inserted` of them have new keys) in one commit under `marker`. False, with nothing written, when the table is
    no longer at `read_version` or does not name a file as the read did; True when written, or when the marker was
    committed already (Delta skips a MERGE in that case too).

    The table's state (rebuilt with Spark jobs for each new version) is read only for what the caller does not
    know at `read_version`: `adds`, the add actions (JSON) of files that include `files`, and `committed_batch`,
    the batch id of the marker of `marker`'s app id in the table (-1: none)."""
    from pyspark.sql import functions as F

    jvm = spark._jvm
    session = spark._jsparkSession
    txn = _transaction_at(spark, path, read_version)
    if txn is None:
        return False
    log, snapshot = txn.deltaLog(), txn.snapshot()
    committed = int(txn.txnVersion(marker.app_id)) if committed_batch is None else committed_batch
    if committed >= marker.batch_id:
        return True
    txn.readWholeTable()
    helper = _scala_object(jvm.org.apache.spark.sql.delta.commands, "DMLWithDeletionVectorsHelper$")
    candidates = helper.generateCandidateFileMap(log.dataPath(), add_files(jvm, adds) if adds else txn.filterFiles())
    vectors = _current_vectors(spark, candidates, files)
    if vectors is None:
        return False
    positions = located.select(F.col("file").alias(_FILE_COLUMN), F.col("file_row").alias(_ROW_COLUMN))
    marked = positions.join(F.broadcast(vectors), on=_FILE_COLUMN, how="left")
    generator = _scala_object(jvm.org.apache.spark.sql.delta.commands, "DeletionVectorBitmapGenerator$")
    results = generator.buildDeletionVectors(session, marked._jdf, log, txn)
    touched = helper.findFilesWithMatchingRows(txn, candidates, results)
    if adds:
        marks, counts = _marked_entries(jvm, touched)
    else:
        actions, mark_counts = _pair(helper.processUnmodifiedData(session, touched, snapshot))
        marks = actions.toList()
        counts = {name: int(mark_counts.apply(name)) for name in _MARK_COUNTS}
    written = _write_files(txn, rows)
    replaced = counts["numModifiedRows"]
    _register_metrics(spark, txn, {
        "numSourceRows": replaced + inserted,
        "operationNumSourceRows": replaced + inserted,
        "numOutputRows": replaced + inserted,
        "numTargetRowsInserted": inserted,
        "numTargetRowsUpdated": replaced,
        "numTargetRowsMatchedUpdated": replaced,
        "numTargetRowsCopied": 0,
        "numTargetRowsDeleted": 0,
        "numTargetFilesAdded": int(written.size()),
        "numTargetFilesRemoved": counts["numRemovedFiles"],
        "numTargetDeletionVectorsAdded": counts["numDeletionVectorsAdded"],
        "numTargetDeletionVectorsRemoved": counts["numDeletionVectorsRemoved"],
        "numTargetDeletionVectorsUpdated": counts["numDeletionVectorsUpdated"],
    })  # fmt: skip
    txn.commit(marks.appendedAll(written).appended(_marker_action(jvm, marker)), _merge_operation(jvm))
    return True


def append_known(
    spark: SparkSession, path: str, read_version: int, rows: DataFrame, marker: BatchMarker, committed_batch: int
) -> int | None:
    """Append `rows` (the table's columns) in one commit under `marker`, where the table at `read_version` holds
    `committed_batch` as the marker of `marker`'s app id (-1: none): what a DataFrame append with ``txnAppId``
    writes, without rebuilding the table's state to read the marker. None, with nothing written, when the table
    is no longer at `read_version`; else the version that holds the marker: the commit's, or `read_version` when
    the marker was committed already."""
    if committed_batch >= marker.batch_id:
        return read_version if _transaction_at(spark, path, read_version) is not None else None
    pending = PendingFiles.write(spark, path, read_version, rows)
    return None if pending is None else pending.commit_append(marker)


def overwrite_known(
    spark: SparkSession,
    path: str,
    read_version: int,
    rows: DataFrame,
    marker: BatchMarker,
    *,
    adds: Collection[str],
    committed_batch: int | None = None,
) -> int | None:
    """Replace every file of the table at `read_version` (`adds`: the add actions, as JSON, of all of them) with
    `rows` (the table's columns) in one commit under `marker`: what a DataFrame overwrite with ``txnAppId``
    writes, without rebuilding the table's state to list the files it removes (and, when `committed_batch` is
    known, to look the marker up). None, with nothing written, when the table is no longer at `read_version`;
    else the version that holds the marker: the commit's, or `read_version` when it was committed already."""
    jvm = spark._jvm
    txn = _transaction_at(spark, path, read_version)
    if txn is None:
        return None
    committed = int(txn.txnVersion(marker.app_id)) if committed_batch is None else committed_batch
    if committed >= marker.batch_id:
        return read_version
    txn.readWholeTable()  # any commit of another writer meanwhile fails this one as a conflict
    txn.readTxn().addOne(marker.app_id)
    stamp = int(time.time() * 1000)
    parse = jvm.org.apache.spark.sql.delta.actions.Action.fromJson
    removes = jvm.java.util.ArrayList()
    for text in adds:
        removes.add(parse(text).removeWithTimestamp(stamp, True))
    written = _write_files(txn, rows)
    actions = jvm.scala.jdk.javaapi.CollectionConverters.asScala(removes).toList().appendedAll(written)
    return int(txn.commit(actions.appended(_marker_action(jvm, marker)), _write_operation(jvm, "Overwrite")))


class PendingFiles:
    """Rows written as new files of a table inside a transaction started at a known version, not committed yet:
    the caller commits them as an append under its marker (:meth:`commit_append`) or deletes them (:meth:`drop`).
    Lets a job write a batch in the job that decodes it and check it afterwards, from the written files."""

    def __init__(self, spark: SparkSession, txn: Any, written: Any, *, made_folder: bool = False) -> None:
        self.spark = spark
        self._txn = txn
        self._written = written
        #: Whether the write made the table's folder (the commit would have created the table in it).
        self._made_folder = made_folder

    @classmethod
    def write(cls, spark: SparkSession, path: str, read_version: int, rows: DataFrame) -> PendingFiles | None:
        """`rows` (the table's columns) written as new files; None, with nothing written, when the table is no
        longer at `read_version`."""
        txn = _transaction_at(spark, path, read_version)
        return None if txn is None else cls(spark, txn, _write_files(txn, rows))

    @classmethod
    def create(
        cls, spark: SparkSession, path: str, schema_ddl: str, configuration: Mapping[str, str], rows: DataFrame
    ) -> PendingFiles | None:
        """`rows` written as the first files of a table with columns `schema_ddl` and table properties
        `configuration` that the commit creates, as a DataFrame append to a new path does, so the table's first
        version holds its first rows; None, with nothing written, when a table is at `path` already."""
        folder = spark._jvm.org.apache.hadoop.fs.Path(path)
        made_folder = not folder.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf()).exists(folder)
        txn = _new_table_transaction(spark, path, schema_ddl, configuration)
        return None if txn is None else cls(spark, txn, _write_files(txn, rows), made_folder=made_folder)

    @property
    def paths(self) -> list[str]:
        """The written files' absolute paths."""
        log = self._txn.deltaLog()
        return [str(added.absolutePath(log)) for added in self._adds()]

    @property
    def stats(self) -> list[str | None]:
        """The written files' statistics (JSON, as their log entries will hold them)."""
        return [added.stats() for added in self._adds()]

    def commit_append(self, marker: BatchMarker) -> int:
        """Commit the files as an append under `marker`; returns the commit's version. The marker's app id is
        registered as read, so a commit of another writer with it since the transaction's version fails this
        one as a conflict, as after Delta's own lookup."""
        jvm = self.spark._jvm
        self._txn.readTxn().addOne(marker.app_id)
        actions = self._written.appended(_marker_action(jvm, marker))
        return int(self._txn.commit(actions, _write_operation(jvm, "Append")))

    def drop(self) -> None:
        """Delete the written files (no commit names them); for a table the commit would have created, the folder
        the write made, unless a table log appeared in it meanwhile."""
        jvm = self.spark._jvm
        conf = self.spark._jsparkSession.sessionState().newHadoopConf()
        if self._made_folder:
            folder = self._txn.deltaLog().dataPath()
            filesystem = folder.getFileSystem(conf)
            if not filesystem.exists(self._txn.deltaLog().logPath()):
                filesystem.delete(folder, True)
                return
        for path in self.paths:
            hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
            hadoop_path.getFileSystem(conf).delete(hadoop_path, False)

    def _adds(self) -> list[Any]:
        return [self._written.apply(i) for i in range(self._written.size())]


def create_empty(spark: SparkSession, path: str, schema_ddl: str, configuration: Mapping[str, str]) -> int | None:
    """Create the table at `path` with no row, as ``CREATE TABLE`` does but also in a folder that holds files no
    table names (a write of a job stopped before its commit), as a DataFrame append to a new path does; returns
    the commit's version (0), or None when a table is at `path` already."""
    jvm = spark._jvm
    txn = _new_table_transaction(spark, path, schema_ddl, configuration)
    if txn is None:
        return None
    operation = jvm.org.apache.spark.sql.delta.DeltaOperations.CreateTable(
        txn.metadata(), False, False, jvm.scala.Option.empty()
    )
    return int(txn.commit(_scala_object(jvm.scala.collection.immutable, "Nil$"), operation))


def _new_table_transaction(
    spark: SparkSession, path: str, schema_ddl: str, configuration: Mapping[str, str]
) -> Any | None:
    """A transaction whose commit creates the table at `path` with columns `schema_ddl` and properties
    `configuration`; None when a table is there already."""
    jvm = spark._jvm
    txn = _transaction_at(spark, path, -1)
    if txn is None:
        return None
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": jvm.org.apache.spark.sql.types.StructType.fromDDL(schema_ddl).json(),
        "partitionColumns": [],
        "configuration": dict(configuration),
        "createdTime": int(time.time() * 1000),
    }
    # Delta adds the protocol the properties need (deletion vectors: the table feature) with the metadata.
    txn.updateMetadataForNewTable(
        jvm.org.apache.spark.sql.delta.actions.Action.fromJson(json.dumps({"metaData": metadata}))
    )
    return txn


def _transaction_at(spark: SparkSession, path: str, read_version: int) -> Any | None:
    """A transaction on the table at `path`, if the table is still at `read_version`."""
    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    txn = log.startTransaction()
    return txn if int(txn.snapshot().version()) == read_version else None


def _write_files(txn: Any, rows: DataFrame) -> Any:
    """`rows` written as new files of the transaction's table (its columns, in its order), not committed yet."""
    from pyspark.sql import functions as F

    names = txn.metadata().schema().fieldNames()
    return txn.writeFiles(rows.select(*[F.col(quote(name)) for name in names])._jdf)


def _marker_action(jvm: Any, marker: BatchMarker) -> Any:
    """The txn marker's log action, stamped now."""
    stamp = jvm.scala.Some(jvm.java.lang.Long.valueOf(int(time.time() * 1000)))
    return jvm.org.apache.spark.sql.delta.actions.SetTransaction(marker.app_id, marker.batch_id, stamp)


def add_files(jvm: Any, adds: Collection[str]) -> Any:
    """Add actions (JSON) as a Scala sequence of Delta's ``AddFile``."""
    parse = jvm.org.apache.spark.sql.delta.actions.Action.fromJson
    files = jvm.java.util.ArrayList()
    for text in adds:
        files.add(parse(text))
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(files).toSeq()


def _marked_entries(jvm: Any, touched: Any) -> tuple[Any, dict[str, int]]:
    """The log entries of the files whose rows were marked (`touched`, Delta's ``TouchedFileWithDV``), as Delta's
    ``processUnmodifiedData`` makes them, and its counts: a file is re-added with its new vector, keeping its
    statistics and tags, which that function looks up in the table's state (a Spark job for each new version)
    because its entries come from a scan that drops them; these come from the log (`adds` of
    :func:`commit_located`), statistics included. With them a file whose every row is marked is known, and it is
    removed instead, as Delta's DELETE does."""
    stamp = int(time.time() * 1000)
    marks = jvm.java.util.ArrayList()
    counts = dict.fromkeys(_MARK_COUNTS, 0)
    for index in range(touched.size()):
        file = touched.apply(index)
        entry = file.fileLogEntry()
        counts["numModifiedRows"] += int(file.numberOfModifiedRows())
        if file.isFullyReplaced():
            marks.add(entry.removeWithTimestamp(stamp, True))
            counts["numRemovedFiles"] += 1
            counts["numDeletionVectorsRemoved"] += int(entry.deletionVector() is not None)
            continue
        update_stats = True  # the statistics say their bounds are no longer tight, as Delta requires with a vector
        default = getattr(entry, "removeRows$default$3")()
        added, removed = _pair(entry.removeRows(file.newDeletionVector(), update_stats, default))
        marks.add(added)
        marks.add(removed)
        if removed.deletionVector() is None:
            counts["numDeletionVectorsAdded"] += 1
        else:
            counts["numDeletionVectorsUpdated"] += 1
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(marks).toList(), counts


def _pair(pair: Any) -> tuple[Any, Any]:
    return pair._1(), pair._2()


def _register_metrics(spark: SparkSession, txn: Any, counts: dict[str, int]) -> None:
    """Give the commit the metrics a MERGE records in the table's history (Delta requires some of them)."""
    jvm = spark._jvm
    factory = _scala_object(jvm.org.apache.spark.sql.execution.metric, "SQLMetrics$")
    metrics = _scala_object(jvm.scala.collection.immutable, "Map$").empty()
    for name, value in counts.items():
        metric = factory.createMetric(spark.sparkContext._jsc.sc(), name)
        metric.set(value)
        metrics = metrics.updated(name, metric)
    txn.registerSQLMetrics(spark._jsparkSession, metrics)


def _current_vectors(spark: SparkSession, candidates: Any, files: Collection[str]) -> DataFrame | None:
    """Each of `files` with its current deletion vector, serialized as Delta's builder expects it (null for
    none), as a frame built in the JVM (no Python on executors); None if the table does not name one of them so
    (`candidates`: the table's files by that name)."""
    from pyspark.sql import DataFrame

    jvm = spark._jvm
    rows = jvm.java.util.ArrayList()
    for path in files:
        entry = candidates.get(path)
        if entry.isEmpty():
            return None
        vector = entry.get().deletionVector()
        cells = spark.sparkContext._gateway.new_array(jvm.java.lang.Object, 2)
        cells[0] = path
        cells[1] = None if vector is None else vector.serializeToBase64()
        rows.add(jvm.org.apache.spark.sql.RowFactory.create(cells))
    schema = jvm.org.apache.spark.sql.types.StructType.fromDDL(f"{_FILE_COLUMN} string, {_VECTOR_COLUMN} string")
    return DataFrame(spark._jsparkSession.createDataFrame(rows, schema), spark)


def _write_operation(jvm: Any, mode: str) -> Any:
    """The commit's operation as a DataFrame write of save mode `mode` (``Append``, ``Overwrite``) records it."""
    nothing = _scala_object(jvm.scala.collection.immutable, "Nil$")
    none = jvm.scala.Option.empty()
    save_mode = getattr(jvm.org.apache.spark.sql.SaveMode, mode)
    return jvm.org.apache.spark.sql.delta.DeltaOperations.Write(save_mode, jvm.scala.Some(nothing), none, none)


def _merge_operation(jvm: Any) -> Any:
    """The commit's operation as the table's history shows it: a MERGE (which is what it does) whose matched
    clause is :data:`MATCHED_ACTION`."""
    none = jvm.scala.Option.empty()
    nothing = _scala_object(jvm.scala.collection.immutable, "Nil$")
    matched = getattr(nothing, "$colon$colon")(
        getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$MergePredicate")(none, MATCHED_ACTION)
    )
    return jvm.org.apache.spark.sql.delta.DeltaOperations.Merge(none, none, none, none, matched, nothing, nothing)


def _scala_object(package: Any, name: str) -> Any:
    """A Scala `object`'s instance (its class's static ``MODULE$``)."""
    return getattr(getattr(package, name), "MODULE$")
