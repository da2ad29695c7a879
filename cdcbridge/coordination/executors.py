"""Executors for shard tasks: a bounded thread pool in production, inline execution in deterministic tests."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any


class InlineExecutor(Executor):
    """Runs each submitted call at once on the caller's thread; the returned future is already done."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # the future carries it, as a pool's would
            future.set_exception(exc)
        return future


def bounded_pool(max_threads: int, thread_name_prefix: str = "cdcbridge-shard") -> ThreadPoolExecutor:
    """The pool shard tasks (or reads ahead) run on: at most `max_threads` run at once, the rest queue."""
    return ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix=thread_name_prefix)
