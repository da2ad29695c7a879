"""Read rows back from the source for RECORD_IMAGE of UPDATE records (update-lookup semantics).

A stream UPDATE record carries only the changed cells; the image must be the whole row, so the bridge reads the
current rows of a fetched page with BatchGetRow (at most 100 rows a request, the service limit) through the
official SDK, and the formats layer falls back to a `partial` image when a row is gone.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

from tablestore import BatchGetRowRequest, OTSClient, TableInBatchGetRowItem

from cdcbridge.changes import Value

#: name → (value, version in ms) of a row's attribute columns, latest version only.
CurrentRow = dict[str, tuple[Value, int]]

BATCH_GET_LIMIT = 100


class RowLookupError(Exception):
    """The source refused to return rows for update lookup."""


class SourceRowReader:
    def __init__(self, client: OTSClient) -> None:
        self._client = client

    def read_rows(self, table: str, primary_keys: Seq[list[tuple[str, Value]]]) -> list[CurrentRow | None]:
        """Current rows for `primary_keys`, in the same order; None where the row does not exist."""
        rows: list[CurrentRow | None] = []
        for start in range(0, len(primary_keys), BATCH_GET_LIMIT):
            chunk = [list(pk) for pk in primary_keys[start : start + BATCH_GET_LIMIT]]
            request = BatchGetRowRequest()
            request.add(TableInBatchGetRowItem(table, chunk, max_version=1))
            response = self._client.batch_get_row(request)
            for index, item in enumerate(response.get_result_by_table(table)):
                if not item.is_ok:
                    raise RowLookupError(
                        f"reading row {chunk[index]} of table {table} back for its image failed: "
                        f"{item.error_code} {item.error_message}"
                    )
                row = item.row
                if row is None or not row.primary_key:
                    rows.append(None)
                    continue
                rows.append({name: (value, timestamp) for name, value, timestamp in row.attribute_columns})
        return rows
