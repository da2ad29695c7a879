"""T15: random interleavings of takes, renewals, steals, hand-offs, checkpoints, crashes, freezes, stops, splits,
merges, trims, store outages and ambiguous writes, with the invariants of leases.md §5.5 checked after every step
and liveness (every retained record delivered, every closed shard finished) checked at the end."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from cdcbridge.coordination import SHARD_END, ExtendedSequence, WorkerState, WriteFault
from cdcbridge.coordination.errors import CheckpointOutOfRangeError, LeaseStoreError
from cdcbridge.coordination.leases.lease import COL_CHECKPOINT_SEQ, COL_LEASE_COUNTER
from cdcbridge.coordination.leases.memory_store import Primitive
from tests.unit.coordination.helpers import STREAM, Cluster, Delivery

MAX_LIVE = 4


class LeaseProtocolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cluster = Cluster(shard_count=2, auto_ack=False)
        self.frozen: dict[str, object] = {}
        self.crashed: set[str] = set()
        self.next_id = 0
        self.checked_writes = 0
        self.parent_violations: list[str] = []
        self.cluster.journal.on_delivery = self._check_parents_first
        self.steals_seen: dict[str, int] = {}

    # ----- setup ------------------------------------------------------------------------------------------------

    @initialize(workers=st.integers(1, 3), records=st.integers(0, 20))
    def start(self, workers: int, records: int) -> None:
        for _ in range(workers):
            self._add_worker()
        self._put(records)

    def _add_worker(self, worker_id: str | None = None) -> None:
        if worker_id is None:
            worker_id = f"w{self.next_id}"
            self.next_id += 1
        try:
            self.cluster.add_worker(worker_id)
        except LeaseStoreError:
            self.cluster.workers.pop(worker_id, None)  # start-up failed during an outage: as if never started

    def _put(self, count: int) -> None:
        for i in range(count):
            self.cluster.stream.put(f"key{(len(self.cluster.stream.history) * 7 + i) % 13}")

    def _live(self) -> list[str]:
        return sorted(self.cluster.workers)

    # ----- rules ------------------------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0, 7.0, 13.0]))
    def step(self, seconds: float) -> None:
        self.cluster.clock.advance(seconds)
        for worker_id, worker in list(self.cluster.workers.items()):
            before = worker.stats.steal_requests
            worker.run_once()
            assert worker.stats.steal_requests - before <= self.cluster.settings.steals_per_cycle  # I7
            if worker.state in (WorkerState.STOPPED, WorkerState.FENCED):
                self.cluster.workers.pop(worker_id)

    @rule(records=st.integers(1, 15))
    def put(self, records: int) -> None:
        self._put(records)

    @precondition(lambda self: len(self.cluster.workers) + len(self.frozen) < MAX_LIVE)
    @rule()
    def add_worker(self) -> None:
        self._add_worker()

    @precondition(lambda self: bool(self.crashed) and len(self.cluster.workers) + len(self.frozen) < MAX_LIVE)
    @rule(data=st.data())
    def restart_crashed_with_same_id(self, data: st.DataObject) -> None:
        worker_id = data.draw(st.sampled_from(sorted(self.crashed)))
        self.crashed.discard(worker_id)
        self._add_worker(worker_id)

    @precondition(lambda self: bool(self.cluster.workers))
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        worker_id = data.draw(st.sampled_from(self._live()))
        self.cluster.crash(worker_id)
        self.crashed.add(worker_id)

    @precondition(lambda self: bool(self.cluster.workers))
    @rule(data=st.data())
    def graceful_stop(self, data: st.DataObject) -> None:
        self.cluster.workers[data.draw(st.sampled_from(self._live()))].request_stop()

    @precondition(lambda self: bool(self.cluster.workers))
    @rule(data=st.data())
    def freeze(self, data: st.DataObject) -> None:
        worker_id = data.draw(st.sampled_from(self._live()))
        self.frozen[worker_id] = self.cluster.workers.pop(worker_id)

    @precondition(lambda self: bool(self.frozen))
    @rule(data=st.data())
    def unfreeze(self, data: st.DataObject) -> None:
        worker_id = data.draw(st.sampled_from(sorted(self.frozen)))
        self.cluster.workers[worker_id] = self.frozen.pop(worker_id)  # type: ignore[assignment]

    @precondition(lambda self: any(p.pending for p in self.cluster.all_processors()))
    @rule(data=st.data(), count=st.integers(1, 10))
    def kafka_acks(self, data: st.DataObject, count: int) -> None:
        """Delivery callbacks confirm records; zombies' acks included (they must be refused)."""
        candidates = [p for p in self.cluster.all_processors() if p.pending]
        processor = data.draw(st.sampled_from(candidates))
        processor.ack(count)
        assert not [e for e in processor.checkpoint_errors if isinstance(e, CheckpointOutOfRangeError)]

    @rule(data=st.data())
    def split(self, data: st.DataObject) -> None:
        self.cluster.stream.split(data.draw(st.sampled_from(self.cluster.stream.open_shard_ids())))

    @precondition(lambda self: bool(self.cluster.stream.adjacent_open_pairs()))
    @rule(data=st.data())
    def merge(self, data: st.DataObject) -> None:
        first, second = data.draw(st.sampled_from(self.cluster.stream.adjacent_open_pairs()))
        self.cluster.stream.merge(first, second)

    @rule(keep=st.integers(0, 30))
    def trim(self, keep: int) -> None:
        self.cluster.stream.trim(keep_last=keep)

    @rule(applied=st.booleans(), primitive=st.sampled_from([Primitive.UPDATE, Primitive.PUT, None]))
    def ambiguous_write(self, applied: bool, primitive: Primitive | None) -> None:
        fault = WriteFault.APPLIED_THEN_TIMEOUT if applied else WriteFault.TIMEOUT_NOT_APPLIED
        self.cluster.store.inject_write_fault(fault, primitive=primitive)

    @rule(seconds=st.sampled_from([2.0, 8.0, 25.0]))
    def store_outage(self, seconds: float) -> None:
        self.cluster.store.set_unavailable(True)
        self.step(seconds)
        self.cluster.store.set_unavailable(False)

    @precondition(lambda self: bool(self.cluster.all_processors()))
    @rule(data=st.data())
    def processor_raises(self, data: st.DataObject) -> None:
        """A processor starts failing (it is replaced by a fresh one from the factory on restart)."""
        data.draw(st.sampled_from(self.cluster.all_processors())).fail_process = True

    @rule(failing=st.booleans())
    def flushes_fail(self, failing: bool) -> None:
        self.cluster.journal.fail_shutdowns = failing

    # ----- invariants -------------------------------------------------------------------------------------------

    def _check_parents_first(self, delivery: Delivery) -> None:
        """I4, at the moment of delivery."""
        for parent in self.cluster.stream.parents_of(delivery.shard_id):
            lease = self.cluster.store.get_lease(STREAM, parent)
            if parent in self.cluster.stream.shard_ids() and (lease is None or lease.checkpoint != SHARD_END):
                self.parent_violations.append(f"{delivery.shard_id} delivered before parent {parent} finished")

    @invariant()
    def children_never_start_before_their_parents_finish(self) -> None:
        assert self.parent_violations == []

    @invariant()
    def counters_move_by_one_and_never_back(self) -> None:
        """I1 on the store's write log."""
        log = self.cluster.store.write_log
        for record in log[self.checked_writes :]:
            if record.primitive is Primitive.PUT:
                assert record.before is None and record.after is not None and record.after[COL_LEASE_COUNTER] == 0
            elif record.primitive is Primitive.UPDATE:
                assert record.before is not None and record.after is not None
                step = int(record.after[COL_LEASE_COUNTER]) - int(record.before[COL_LEASE_COUNTER])
                assert step in (0, 1)
                if step == 0:  # only a steal request leaves the counter alone
                    assert set(k for k in record.after if record.after[k] != record.before.get(k)) <= {"LeaseStealer"}
                before_seq, after_seq = record.before.get(COL_CHECKPOINT_SEQ), record.after.get(COL_CHECKPOINT_SEQ)
                if before_seq and after_seq:  # I2: checkpoints only move forward
                    assert ExtendedSequence.from_text(str(after_seq)) >= ExtendedSequence.from_text(str(before_seq))
            else:
                assert record.key.shard_id not in self.cluster.stream.shard_ids()  # only vanished shards (I8)
        self.checked_writes = len(log)

    @invariant()
    def at_most_one_owner_acts_on_a_shard(self) -> None:
        """I1/I5: at any instant, at most one worker (frozen ones included) may act as owner of a shard."""
        now = self.cluster.clock.monotonic()
        fence = self.cluster.settings.self_fence_after_seconds
        acting: dict[str, list[str]] = {}
        for worker in [*self.cluster.workers.values(), *self.frozen.values()]:
            for held in worker.held.all():  # type: ignore[attr-defined]
                if held.is_fresh(now, fence):
                    acting.setdefault(held.shard_id, []).append(worker.worker_id)  # type: ignore[attr-defined]
        assert all(len(owners) == 1 for owners in acting.values()), acting

    @invariant()
    def committed_records_were_delivered(self) -> None:
        """I2/I3: a stored CheckpointSeq only covers records some processor received (or that expired unread)."""
        delivered = set(self.cluster.journal.delivered_sequences())
        for lease in self.cluster.store.list_leases(STREAM):
            if lease.checkpoint_seq is None or lease.shard_id not in self.cluster.stream.shard_ids():
                continue
            retained = {r.sequence for r in self.cluster.stream.retained_records_of(lease.shard_id)}
            for record in self.cluster.stream.records_of(lease.shard_id):
                if lease.checkpoint_seq.covers(record.sequence) and record.sequence in retained:
                    assert record.sequence in delivered, f"{lease.describe()} covers undelivered {record.sequence}"

    # ----- liveness at the end -------------------------------------------------------------------------------

    def teardown(self) -> None:
        cluster = self.cluster
        cluster.store.set_unavailable(False)
        cluster.store.clear_faults()
        cluster.journal.fail_shutdowns = False
        for worker_id, worker in self.frozen.items():
            cluster.workers[worker_id] = worker  # type: ignore[assignment]
        self.frozen.clear()
        if not any(w.state is WorkerState.RUNNING for w in cluster.workers.values()):
            self._add_worker("finisher")
        retained = set()
        for _ in range(150):
            self.step(2.0)
            for processor in cluster.all_processors():
                processor.ack()
            if not any(w.state is WorkerState.RUNNING for w in cluster.workers.values()):
                self._add_worker(f"finisher{self.next_id}")
                self.next_id += 1
            retained = {
                r.sequence for sid in cluster.stream.shard_ids() for r in cluster.stream.retained_records_of(sid)
            }
            closed = set(cluster.stream.shard_ids()) - set(cluster.stream.open_shard_ids())
            leases = cluster.leases()
            if retained <= set(cluster.journal.delivered_sequences()) and all(
                leases.get(s) is not None and leases[s].is_finished for s in closed
            ):
                break
        missing = retained - set(cluster.journal.delivered_sequences())
        assert not missing, f"{len(missing)} retained records never delivered"  # I3
        closed = set(cluster.stream.shard_ids()) - set(cluster.stream.open_shard_ids())
        unfinished = [s for s in closed if not cluster.finished(s)]
        assert not unfinished, f"closed shards never finished: {unfinished}"  # I8: nothing stuck
        self.children_never_start_before_their_parents_finish()
        first_seen: dict[str, list[int]] = {}
        for delivery in cluster.journal.deliveries:  # I4: per key, new versions arrive in commit order
            versions = first_seen.setdefault(delivery.key, [])
            value = int(delivery.value)  # type: ignore[call-overload]
            if value not in versions:
                assert not versions or value > versions[-1], f"{delivery.key}: version {value} after {versions}"
                versions.append(value)


TestLeaseProtocol = LeaseProtocolMachine.TestCase
TestLeaseProtocol.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
