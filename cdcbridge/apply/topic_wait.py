"""With `apply.wait_for_topics`, the apply job waits until its topics exist before it starts Spark's query: a job
started beside the bridge workers (docker compose) has nothing to read until a worker created them. The wait is
logged once a minute and whenever what is missing changes, with what creates the topics."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from cdcbridge.apply.routing import TopicRouting
from cdcbridge.kafka.errors import BrokerUnreachableError
from cdcbridge.observability.wait_log import WaitLog

log = logging.getLogger(__name__)

#: How often a waiting job looks again; topics appear when a worker starts, seconds are enough.
TOPIC_POLL_SECONDS = 5.0
ExistingTopics = Callable[[Iterable[str]], Iterable[str]]


def wait_for_topics(
    routing: TopicRouting,
    existing: ExistingTopics,
    stop: threading.Event,
    *,
    clock: Callable[[], float] = time.monotonic,
    poll_seconds: float = TOPIC_POLL_SECONDS,
) -> bool:
    """Return True once every subscribed topic exists (at once with a topic pattern, which Spark follows as topics
    appear), False if `stop` was set first. `existing(names)` gives those of `names` that exist; a broker that does
    not answer yet counts as every topic missing."""
    wanted = routing.subscribed_topics() if routing.pattern is None else []
    wait_log = WaitLog(log, clock=clock)
    while True:
        try:
            missing = sorted(set(wanted) - set(existing(wanted)))
            problem = f"topic(s) {', '.join(missing)} do not exist yet" if missing else ""
        except BrokerUnreachableError as error:
            problem = str(error)
        if not problem:
            if wait_log.waited:
                log.info("the apply job's topics exist; starting")
            return True
        wait_log.waiting(
            problem,
            "apply job waiting: %s; a bridge worker (`cdcbridge run`) creates a table's topics when it starts on the "
            "table (apply.wait_for_topics is on)",
        )
        if stop.wait(poll_seconds):
            return False
