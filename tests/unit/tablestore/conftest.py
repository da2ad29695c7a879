from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.connection import build_ots_client
from cdcbridge.tablestore.retry import StreamRetryPolicy
from tests.unit.tablestore.fake_tablestore import FakeTablestore

ACCESS_KEY_ID = "test-id"
ACCESS_KEY_SECRET = "test-secret-do-not-leak"


@pytest.fixture
def fake() -> Iterator[FakeTablestore]:
    service = FakeTablestore({ACCESS_KEY_ID: ACCESS_KEY_SECRET}).start()
    yield service
    service.stop()


@pytest.fixture
def no_delay_policy() -> StreamRetryPolicy:
    """Retries as in production, without waiting (the SDK sleeps the policy's delay)."""
    return StreamRetryPolicy(max_retry_times=3, max_retry_delay=0.0)


@pytest.fixture
def stream_client(fake: FakeTablestore, no_delay_policy: StreamRetryPolicy) -> StreamClient:
    ots = build_ots_client(fake.url, "cdcbridge", ACCESS_KEY_ID, ACCESS_KEY_SECRET, retry_policy=no_delay_policy)
    return StreamClient(ots)
