"""The PostgreSQL target's current rows reach Spark as chunks of whole JSON lines, each small enough for one task."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cdcbridge.apply.targets.postgres_frames import text_chunks

lines = st.lists(st.text(alphabet='ab{}:,"', min_size=0, max_size=30), min_size=1, max_size=40)


@given(st.lists(lines, min_size=1, max_size=4), st.integers(min_value=1, max_value=80))
def test_chunks_keep_every_line_in_order_and_stay_within_the_limit_unless_one_line_is_longer(texts, limit):
    chunks = text_chunks(["\n".join(text) for text in texts], limit)
    assert [line for chunk in chunks for line in chunk.split("\n")] == [line for text in texts for line in text]
    for chunk in chunks:
        assert len(chunk) <= limit or "\n" not in chunk


def test_a_large_text_is_cut_at_line_ends_into_chunks_within_the_limit():
    text = "\n".join(f'{{"row": {n}}}' for n in range(1000))
    chunks = text_chunks([text], limit=1000)
    assert len(chunks) > len(text) // 1000
    assert all(len(chunk) <= 1000 for chunk in chunks)
    assert all(chunk.startswith('{"row": ') and chunk.endswith("}") for chunk in chunks)
    assert text_chunks(["x" * 50 + "\n" + "y" * 5], limit=10) == ["x" * 50, "y" * 5]
