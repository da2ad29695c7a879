"""The key property: whatever Kafka and the bridge do to delivery — duplicates, any split into batches,
redeliveries crossing batch boundaries, bridge re-sends after a restart, shuffling inside a batch, a batch applied
twice — the target ends where a fold applying each operation exactly once in order ends, and image and mutation
topics of the same source history end at the source row."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cdcbridge.apply.core import RowKey, TargetRow, apply_operation, decode_message, fold_batch
from cdcbridge.contract import CellOp
from tests.unit.apply.envelopes import PK, TABLE, increment, mutation, put
from tests.unit.apply.source_model import SourceRow, image_messages, mutation_messages, run_history
from tests.unit.apply.strategies import histories, lookup_points

PROPERTY_SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEY: RowKey = (TABLE, PK)

# --- delivery ------------------------------------------------------------------------------------------------------


@st.composite
def deliveries(draw: st.DrawFn, messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Batches as an apply job could see them.

    The bridge produces the messages in order, sometimes re-sending the last few after a "restart" (new offsets).
    The consumer splits the log into consecutive batches, delivers each message 1–3 times (extra copies in the
    same batch or up to two batches later), and each batch arrives shuffled.
    """
    log: list[dict[str, Any]] = []

    def produce(message: dict[str, Any]) -> None:
        log.append({**message, "_topic": "cdc.orders", "_partition": 0, "_offset": len(log)})

    for position, message in enumerate(messages):
        produce(message)
        if draw(st.integers(0, 5)) == 0:
            resend_from = position - draw(st.integers(0, min(position, 3)))
            event("bridge re-sent messages after a restart")
            for again in messages[resend_from : position + 1]:
                produce(again)
    batches: list[list[dict[str, Any]]] = [[]]
    first_batch = []
    for message in log:
        if batches[-1] and draw(st.booleans()):
            batches.append([])
        batches[-1].append(message)
        first_batch.append(len(batches) - 1)
    for message, batch_index in zip(log, first_batch, strict=True):
        for _ in range(draw(st.integers(0, 2))):
            target = batch_index + draw(st.integers(0, 2))
            while target >= len(batches):
                batches.append([])
            batches[target].append(message)
    return [draw(st.permutations(batch)) for batch in batches]


def apply_batches(batches: list[list[dict[str, Any]]], *, reapply: list[bool] | None = None) -> TargetRow | None:
    """Run batches against an in-memory target, checking on the way what a guarded upsert relies on.
    ``reapply[i]``: batch i is applied a second time (a re-run without marker)."""
    target: dict[RowKey, TargetRow] = {}
    for index, batch in enumerate(batches):
        twice = reapply is not None and reapply[index]
        result = fold_batch(batch, target)
        assert result.dead_letters == []
        for key, row in result.rows.items():
            before = target.get(key)
            assert before is None or before.seq is None or row.seq > before.seq  # `s._seq > t._seq` accepts it
        target.update(result.rows)
        if twice:  # a re-run batch without marker: the guard alone makes it a no-op
            assert fold_batch(batch, target).rows == {}
    return target.get(KEY)


def reference_fold(messages: list[dict[str, Any]]) -> TargetRow | None:
    """Each operation exactly once, in seq order, no guard; seq-less tombstones only follow their delete."""
    operations = [decode_message(m) for m in messages]
    row = None
    for operation in sorted((op for op in operations if op.seq_key is not None), key=lambda op: op.seq_key):
        row = apply_operation(row, operation)
    return row


def source_view(row: TargetRow | None) -> tuple[bool, dict[str, tuple[str, Any, int | None]]]:
    """(live, columns with value types) of a target row, comparable with the source model."""
    if row is None or row.deleted:
        return (False, {})
    return (True, {name: (type(c.value).__name__, c.value, c.version) for name, c in row.columns.items()})


def model_view(state: SourceRow) -> tuple[bool, dict[str, tuple[str, Any, int | None]]]:
    if not state.exists:
        return (False, {})
    return (True, {name: (type(value).__name__, value, version) for name, (value, version) in state.columns.items()})


# --- properties ----------------------------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(history=histories, data=st.data())
def test_mutation_log_any_delivery_equals_exactly_once_in_order(history, data):
    records, states = run_history(history)
    messages = mutation_messages(records)
    if any(
        c.op is CellOp.DELETE_ONE_VERSION and c.version == s.columns.get(c.name, (0, -2))[1]
        for r, s in zip(records[1:], states, strict=False)
        for c in r.cells
    ):
        event("DELETE_ONE_VERSION of the held version")
    if any(c.op is CellOp.INCREMENT and not c.with_result for r in records for c in r.cells):
        event("increment by amount only")
    batches = data.draw(deliveries(messages))
    reapply = data.draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    final = apply_batches(batches, reapply=reapply)
    assert final == reference_fold(messages)
    assert source_view(final) == model_view(states[-1])


@PROPERTY_SETTINGS
@given(history=histories, data=st.data())
def test_record_image_any_delivery_equals_exactly_once_in_order(history, data):
    records, states = run_history(history)
    messages = image_messages(records, states, data.draw(lookup_points(len(records))))
    if any(m.get("partial") for m in messages):
        event("partial image")
    batches = data.draw(deliveries(messages))
    reapply = data.draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    final = apply_batches(batches, reapply=reapply)
    assert final == reference_fold(messages)
    assert source_view(final) == model_view(states[-1])


@PROPERTY_SETTINGS
@given(history=histories, data=st.data())
def test_image_and_mutation_topics_of_one_history_end_at_the_same_row(history, data):
    records, states = run_history(history)
    from_mutations = apply_batches([mutation_messages(records)])
    images = image_messages(records, states, data.draw(lookup_points(len(records))))
    from_images = apply_batches(data.draw(deliveries(images)))
    assert source_view(from_mutations) == source_view(from_images) == model_view(states[-1])
    assert (from_mutations is None) == (from_images is None)
    if from_mutations is not None:
        assert from_mutations.source_ts == from_images.source_ts == len(records)


@settings(max_examples=150, deadline=None)
@given(
    amounts=st.lists(st.integers(-100, 100), min_size=1, max_size=15),
    data=st.data(),
)
def test_increments_never_count_twice(amounts, data):
    messages = [mutation(1, "PUT", [put("n", 0, 1)])]
    messages += [mutation(i + 2, "INCREMENT", [increment("n", amount)]) for i, amount in enumerate(amounts)]
    batches = data.draw(deliveries(messages))
    final = apply_batches(batches, reapply=[True] * len(batches))
    assert final.columns["n"].value == sum(amounts)


@settings(max_examples=100, deadline=None)
@given(cycles=st.integers(1, 6), data=st.data())
def test_delete_then_reput_cycles_end_in_the_last_state(cycles, data):
    messages = []
    for cycle in range(cycles):
        messages.append(mutation(3 * cycle + 1, "PUT", [put("v", cycle, 3 * cycle + 1)]))
        messages.append(mutation(3 * cycle + 2, "INCREMENT", [increment("c", 1)]))
        messages.append(mutation(3 * cycle + 3, "DELETE"))
    end_deleted = data.draw(st.booleans())
    if not end_deleted:
        messages = messages[:-1]
    batches = data.draw(deliveries(messages))
    final = apply_batches(batches, reapply=[True] * len(batches))
    assert final.deleted is end_deleted
    expected = {} if end_deleted else {"v": cycles - 1, "c": 1}  # the counter restarts after every delete
    assert {name: cell.value for name, cell in final.columns.items()} == expected
