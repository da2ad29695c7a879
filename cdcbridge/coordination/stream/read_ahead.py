"""Reading a shard's next page while the current one is processed.

A GetStreamRecord call is mostly waiting: on the network and on the service. Started as soon as a page arrives,
the read of the next page overlaps with the processing of this one, as the Kinesis Client Library's prefetching
does. It changes no outcome: the page read ahead is handed out only for the very cursor it was read at, and its
error, if the read failed, is raised when the page is asked for, exactly as a read made then would raise it. A page
read ahead and never asked for (the processor restarted, the lease was lost) is dropped.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future

from cdcbridge.coordination.stream.access import RecordBatch, RecordFetcher


class PageReader:
    """Reads the pages of one shard for one processor incarnation, each next page read ahead on `executor`.

    Without an executor it reads each page when asked (the behaviour of deterministic tests and of
    ``coordination.read_ahead: false``).
    """

    def __init__(self, stream: RecordFetcher, executor: Executor | None) -> None:
        self._stream = stream
        self._executor = executor
        #: (cursor, limit) of the page being read ahead, and its future.
        self._ahead: tuple[tuple[str, int], Future[RecordBatch]] | None = None

    def read(self, cursor: str, limit: int) -> RecordBatch:
        """The page at `cursor`: the one read ahead for it, or a fresh read."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == (cursor, limit):
            batch = ahead[1].result()  # raises the read's own error
        else:
            batch = self._stream.get_records(cursor, limit)
        if self._executor is not None and batch.records and batch.next_iterator is not None:
            # An empty page means the shard is idle: the next read waits for the idle interval instead.
            following = batch.next_iterator
            self._ahead = ((following, limit), self._executor.submit(self._stream.get_records, following, limit))
        return batch

    @property
    def reading_ahead(self) -> bool:
        return self._ahead is not None
