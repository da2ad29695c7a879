"""The export of one key range: full-row PUT messages that sort before the stream, progress stored only over
acknowledged pages, and a resume that re-exports only what was not acknowledged."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from cdcbridge.changes import Sequence
from cdcbridge.contract import REDACTED_COLUMNS_HEADER
from cdcbridge.formats.columns import ColumnPolicy, ColumnSettings, hash_value
from cdcbridge.snapshot.errors import SnapshotExportError
from cdcbridge.snapshot.export import RangeExporter, RowCounter, snapshot_sequence
from cdcbridge.snapshot.state import SnapshotStateStore

from .fakes import FULL_RANGE, STATUS, STREAM, FakeSink, publisher, source_with_rows

T0_US = 1_700_000_000_000_000


def exporter(client, sink: FakeSink, halt: threading.Event | None = None, counter: RowCounter | None = None):
    return RangeExporter(
        ots=client, publisher=publisher(sink), store=SnapshotStateStore(client, STATUS), stream_id=STREAM,
        start_us=T0_US, page_rows=4, counter=counter or RowCounter(), halt=halt or threading.Event(),
        max_pending_pages=2, drain_timeout_seconds=0.2,
    )  # fmt: skip


def stored(client) -> dict:
    return SnapshotStateStore(client, STATUS).read_ranges(STREAM)[0]


def test_every_row_becomes_a_full_image_and_a_replace_row_put_before_the_stream() -> None:
    client, sink, counter = source_with_rows(10), FakeSink(), RowCounter()
    result = exporter(client, sink, counter=counter).export(FULL_RANGE)
    assert result.done and result.rows == 10 and counter.rows == 10
    assert stored(client) == result  # the stored progress says the same
    assert sink.keys(".image") == sink.keys(".mutation") == [f"[{i}]".encode() for i in range(10)]
    image, mutation = sink.values(".image")[3], sink.values(".mutation")[3]
    assert image["columns"] == {"n": {"value": ("long", 3), "version": 1}, "v": {"value": ("string", "value-3"),
                                                                                 "version": 1}}  # fmt: skip
    assert not image["partial"] and not image["row_deleted"]
    assert mutation["type"] == "PUT" and mutation["replace_row"]
    assert image["seq"]["seq_key"] == mutation["seq"]["seq_key"] == snapshot_sequence(T0_US).key()
    assert image["source"]["shard_id"] == "snapshot"


def test_snapshot_messages_sort_before_every_stream_record_from_the_start_on() -> None:
    key = snapshot_sequence(T0_US).key()
    assert key < Sequence(0, T0_US, 0).key() < Sequence(1, 0, 0).key()  # whatever epoch the service uses
    assert key > Sequence(0, T0_US - 2, 9).key()


def test_progress_moves_only_over_acknowledged_pages_and_a_resume_repeats_only_the_rest() -> None:
    client = source_with_rows(10)
    halt = threading.Event()
    # Rows 0-3 (page 1) and 4-7 (page 2) are acknowledged; row 8 (page 3) is produced, then the process "dies".
    first_run = FakeSink(ack_when=lambda i: i < 16, on_produce=lambda i: halt.set() if i == 16 else None)
    progress = exporter(client, first_run, halt).export(FULL_RANGE)
    assert not progress.done
    assert (progress.resume, progress.rows) == ([("id", 8)], 8)
    assert stored(client) == progress

    second_run = FakeSink()
    finished = exporter(client, second_run).export(stored(client))
    assert finished.done and finished.rows == 10
    assert second_run.keys(".mutation") == [b"[8]", b"[9]"]  # only the unacknowledged page again
    exported = {key for key in first_run.keys(".mutation") + second_run.keys(".mutation")}
    assert exported == {f"[{i}]".encode() for i in range(10)}


def test_a_refused_message_stops_the_range_before_its_page() -> None:
    client = source_with_rows(10)
    refusing = FakeSink(fail_when=lambda i: i == 9)  # page 2 (rows 4-7) has messages 8-15
    with pytest.raises(SnapshotExportError, match="table orders range 0: message 9 refused by the broker"):
        exporter(client, refusing).export(FULL_RANGE)
    assert (stored(client).resume, stored(client).rows) == ([("id", 4)], 4)


def test_an_unreadable_range_names_the_key_and_keeps_the_progress() -> None:
    from tablestore import OTSServiceError

    client = source_with_rows(10)
    client.fail_next("GetRange", OTSServiceError(500, "OTSInternalServerError", "boom"))
    with pytest.raises(SnapshotExportError, match=r"range 0: GetRange from \(-inf\) failed"):
        exporter(client, FakeSink()).export(FULL_RANGE)


def test_the_snapshot_masks_rows_like_the_stream_and_names_the_redacted_columns() -> None:
    key = b"unit-test-column-hash-key"
    client, sink = source_with_rows(3), FakeSink()
    headers: list = []
    produce = sink.produce
    sink.produce = lambda *args: headers.append(args[4]) or produce(*args)  # type: ignore[method-assign]
    columns = ColumnPolicy("orders", ColumnSettings.model_validate({"mask": {"v": "hash", "n": "redact"}}), key)
    masked = replace(publisher(sink), columns=columns)
    RangeExporter(
        ots=client, publisher=masked, store=SnapshotStateStore(client, STATUS), stream_id=STREAM, start_us=T0_US,
        page_rows=4, counter=RowCounter(), halt=threading.Event(), drain_timeout_seconds=0.2,
    ).export(FULL_RANGE)  # fmt: skip
    image, mutation = sink.values(".image")[2], sink.values(".mutation")[2]
    assert image["columns"] == {"v": {"value": ("string", hash_value(key, "value-2")), "version": 1}}
    assert [(c["name"], c["value"]) for c in mutation["cells"]] == [("v", ("string", hash_value(key, "value-2")))]
    assert "value-" not in repr(sink.messages)
    assert headers == [[(REDACTED_COLUMNS_HEADER, b"n")]] * 6
