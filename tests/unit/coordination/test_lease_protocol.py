"""The lease protocol of leases.md §5.2 (I1, I9, T2, T8, T12), run against both stores.

The Tablestore store runs on FakeOTSClient, which evaluates each condition from the SDK-encoded request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from tablestore import OTSServiceError

from cdcbridge.changes import Sequence
from cdcbridge.coordination import (
    SHARD_END,
    TRIM_HORIZON,
    ExtendedSequence,
    FakeClock,
    InMemoryLeaseStore,
    Lease,
    LeaseLostError,
    LeaseStoreUnavailableError,
    WriteFault,
)
from cdcbridge.coordination.leases.conditional import ConditionalLeaseStore
from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore
from tests.unit.coordination.fake_ots import FakeOTSClient

STREAM = "stream-1"


@dataclass
class StoreUnderTest:
    store: ConditionalLeaseStore
    #: Make the next write "ambiguous": applied (or not) but reported as a timeout.
    ambiguous_next_write: Callable[[bool], None]
    #: Make the next write fail its condition after actually applying an earlier attempt (an SDK retry).
    applied_then_condition_failure: Callable[[], None]


def _memory() -> StoreUnderTest:
    store = InMemoryLeaseStore(clock=FakeClock())

    def ambiguous(applied: bool) -> None:
        store.inject_write_fault(WriteFault.APPLIED_THEN_TIMEOUT if applied else WriteFault.TIMEOUT_NOT_APPLIED)

    def spurious() -> None:
        original = store._update_row

        def once(key, put, condition):  # type: ignore[no-untyped-def]
            store._update_row = original  # type: ignore[method-assign]
            original(key, put, condition)
            original(key, put, condition)  # the retried attempt fails its condition on our own write

        store._update_row = once  # type: ignore[method-assign]

    return StoreUnderTest(store, ambiguous, spurious)


def _tablestore() -> StoreUnderTest:
    client = FakeOTSClient()
    store = TablestoreLeaseStore(client, "status", clock=FakeClock())
    store.ensure_table()

    def ambiguous(applied: bool) -> None:
        for api in ("UpdateRow", "PutRow", "DeleteRow"):
            client.fail_next(api, OTSServiceError(503, "OTSTimeout", "Request timeout."), applied=applied)

    def spurious() -> None:
        client.fail_next(
            "UpdateRow", OTSServiceError(403, "OTSConditionCheckFail", "Condition check failed."), applied=True
        )

    return StoreUnderTest(store, ambiguous, spurious)


@pytest.fixture(params=["memory", "tablestore"])
def sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    return _memory() if request.param == "memory" else _tablestore()


def _created(store: ConditionalLeaseStore, shard: str = "s0", parents: tuple[str, ...] = ()) -> Lease:
    assert store.create_lease_if_absent(Lease(STREAM, shard, parent_shard_ids=parents))
    lease = store.get_lease(STREAM, shard)
    assert lease is not None
    return lease


def _owned(store: ConditionalLeaseStore, owner: str = "w1", shard: str = "s0") -> Lease:
    return store.take(_created(store, shard), owner)


def test_create_writes_the_seed_schema_and_never_resets_an_existing_row(sut: StoreUnderTest) -> None:
    store = sut.store
    lease = _created(store, "s1", parents=("p1", "p2"))
    assert (lease.counter, lease.owner, lease.stealer, lease.checkpoint) == (0, "", "", TRIM_HORIZON)
    assert lease.parent_shard_ids == ("p1", "p2")
    progressed = store.checkpoint(store.take(lease, "w1"), "it-42", ExtendedSequence(Sequence(1, 2, 3)))

    assert store.create_lease_if_absent(Lease(STREAM, "s1")) is False  # EXPECT_NOT_EXIST (T12)
    assert store.get_lease(STREAM, "s1") == progressed


def test_every_successful_write_raises_the_counter_by_exactly_one(sut: StoreUnderTest) -> None:
    store = sut.store
    lease = _created(store)
    lease = store.take(lease, "w1")
    assert lease.counter == 1
    lease = store.renew(lease)
    lease = store.checkpoint(lease, "it-1", None)
    lease = store.request_steal(lease, "w2")  # the only write that leaves the counter alone
    assert lease.counter == 3
    lease = store.transfer(lease, "w2")
    lease = store.take(lease, "w2")
    lease = store.release(lease)
    assert lease.counter == 6
    assert store.get_lease(STREAM, "s0") == lease


@pytest.mark.parametrize("operation", ["renew", "checkpoint", "transfer", "release"])
def test_owner_writes_need_the_current_counter_and_owner(sut: StoreUnderTest, operation: str) -> None:
    store = sut.store
    current = store.renew(_owned(store))
    # c-2: c-1 would look like our own earlier attempt that landed (that case is resolved as success, see below)
    stale_counter = current.evolve(counter=current.counter - 2)
    other_owner = current.evolve(owner="w9")
    calls = {
        "renew": lambda lease: store.renew(lease),
        "checkpoint": lambda lease: store.checkpoint(lease, "it-9", None),
        "transfer": lambda lease: store.transfer(lease, "w2"),
        "release": lambda lease: store.release(lease),
    }
    for wrong in (stale_counter, other_owner):
        with pytest.raises(LeaseLostError):
            calls[operation](wrong)
    assert store.get_lease(STREAM, "s0") == current  # nothing was written
    assert calls[operation](current).counter == current.counter + 1


def test_take_needs_the_observed_counter_and_clears_the_stealer(sut: StoreUnderTest) -> None:
    store = sut.store
    lease = store.request_steal(_owned(store, "w1"), "w2")
    with pytest.raises(LeaseLostError):
        store.take(lease.evolve(counter=lease.counter - 1), "w3")
    taken = store.take(lease, "w3")
    assert (taken.owner, taken.stealer, taken.counter) == ("w3", "", lease.counter + 1)
    assert store.get_lease(STREAM, "s0") == taken


def test_only_one_steal_request_at_a_time_and_only_from_the_observed_owner(sut: StoreUnderTest) -> None:
    store = sut.store
    lease = _owned(store, "w1")
    with pytest.raises(LeaseLostError):
        store.request_steal(lease.evolve(owner="w7"), "w2")
    requested = store.request_steal(lease, "w2")
    with pytest.raises(LeaseLostError):
        store.request_steal(lease, "w3")
    assert store.get_lease(STREAM, "s0") == requested
    assert requested.stealer == "w2" and requested.counter == lease.counter


def test_delete_needs_an_unchanged_counter(sut: StoreUnderTest) -> None:
    store = sut.store
    lease = _owned(store)
    with pytest.raises(LeaseLostError):
        store.delete(lease.evolve(counter=0))
    assert store.delete(lease) is True
    assert store.get_lease(STREAM, "s0") is None
    assert store.delete(lease) is False


def test_writes_on_a_deleted_row_fail_instead_of_recreating_it(sut: StoreUnderTest) -> None:
    store = sut.store
    lease = _owned(store)
    store.delete(lease)
    with pytest.raises(LeaseLostError):
        store.renew(lease)
    assert store.get_lease(STREAM, "s0") is None


def test_checkpoint_stores_iterator_and_sequence(sut: StoreUnderTest) -> None:
    store = sut.store
    position = ExtendedSequence(Sequence(3, 1_700_000_000_000_001, 2), sub_sequence=4)
    written = store.checkpoint(_owned(store), "iterator-abc", position)
    stored = store.get_lease(STREAM, "s0")
    assert stored == written
    assert stored is not None and stored.checkpoint_seq == position and stored.checkpoint == "iterator-abc"
    finished = store.checkpoint(written, SHARD_END, None)  # None leaves CheckpointSeq as it was
    assert store.get_lease(STREAM, "s0") == finished and finished.checkpoint_seq == position


def test_list_leases_returns_every_lease_of_the_stream_only(sut: StoreUnderTest) -> None:
    store = sut.store
    for shard in ("s0", "s1", "s2", "s3", "s4"):  # more than one GetRange page of the fake client
        _created(store, shard)
    store.create_lease_if_absent(Lease("other-stream", "s0"))
    assert sorted(lease.shard_id for lease in store.list_leases(STREAM)) == ["s0", "s1", "s2", "s3", "s4"]


# ----- I9 / T8: ambiguous writes are resolved by re-reading ----------------------------------------------------


@pytest.mark.parametrize("operation", ["renew", "checkpoint", "take", "transfer", "release", "steal"])
def test_applied_write_reported_as_timeout_is_a_success_without_double_increment(
    sut: StoreUnderTest, operation: str
) -> None:
    store = sut.store
    lease = _owned(store)
    calls = {
        "renew": lambda: store.renew(lease),
        "checkpoint": lambda: store.checkpoint(lease, "it-7", ExtendedSequence(Sequence(1, 1, 1))),
        "take": lambda: store.take(lease, "w2"),
        "transfer": lambda: store.transfer(lease, "w2"),
        "release": lambda: store.release(lease),
        "steal": lambda: store.request_steal(lease, "w2"),
    }
    sut.ambiguous_next_write(True)
    written = calls[operation]()
    assert store.get_lease(STREAM, "s0") == written
    assert written.counter - lease.counter == (0 if operation == "steal" else 1)
    assert store.resolved_ambiguous_writes == 1


def test_timeout_that_did_not_land_keeps_the_lease_and_is_not_a_loss(sut: StoreUnderTest) -> None:
    store = sut.store
    lease = _owned(store)
    sut.ambiguous_next_write(False)
    with pytest.raises(LeaseStoreUnavailableError):
        store.renew(lease)
    assert store.get_lease(STREAM, "s0") == lease
    assert store.renew(lease).counter == lease.counter + 1  # the next cycle simply succeeds


def test_condition_failure_caused_by_our_own_earlier_attempt_is_not_a_lost_lease(sut: StoreUnderTest) -> None:
    store = sut.store
    lease = _owned(store)
    sut.applied_then_condition_failure()
    renewed = store.renew(lease)
    assert store.get_lease(STREAM, "s0") == renewed and renewed.counter == lease.counter + 1


def test_ambiguous_create_never_overwrites(sut: StoreUnderTest) -> None:
    store = sut.store
    sut.ambiguous_next_write(True)
    assert store.create_lease_if_absent(Lease(STREAM, "s0")) is False  # we cannot tell who created it: fine
    assert store.get_lease(STREAM, "s0") is not None
    sut.ambiguous_next_write(False)
    with pytest.raises(LeaseStoreUnavailableError):
        store.create_lease_if_absent(Lease(STREAM, "s9"))


# ----- T2: two workers race for the same expired lease; T12: concurrent syncers -------------------------------


def test_concurrent_takes_of_one_observed_lease_have_exactly_one_winner(sut: StoreUnderTest) -> None:
    store = sut.store
    observed = _owned(store, "dead-worker")
    racers = 8
    barrier = threading.Barrier(racers)
    outcomes: list[str] = []
    lock = threading.Lock()

    def race(worker: str) -> None:
        barrier.wait()
        try:
            store.take(observed, worker)
            result = worker
        except LeaseLostError:
            result = "lost"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=race, args=(f"w{i}",)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o != "lost"]
    assert len(winners) == 1
    final = store.get_lease(STREAM, "s0")
    assert final is not None and final.owner == winners[0] and final.counter == observed.counter + 1


def test_concurrent_syncers_create_a_lease_once_and_never_reset_it(sut: StoreUnderTest) -> None:
    store = sut.store
    barrier = threading.Barrier(6)
    created: list[bool] = []

    def sync() -> None:
        barrier.wait()
        created.append(store.create_lease_if_absent(Lease(STREAM, "new-shard")))

    threads = [threading.Thread(target=sync) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert created.count(True) == 1
    lease = store.get_lease(STREAM, "new-shard")
    assert lease is not None
    progressed = store.checkpoint(store.take(lease, "w1"), "it-5", None)
    assert store.create_lease_if_absent(Lease(STREAM, "new-shard")) is False
    assert store.get_lease(STREAM, "new-shard") == progressed
