"""The PostgreSQL target hands its current rows to Spark as a frame of lines, one task per chunk of them."""

from __future__ import annotations

from cdcbridge.apply.targets.postgres_frames import current_row_lines, text_chunks


def test_the_lines_arrive_whole_and_in_one_task_per_chunk(spark):
    texts = ["\n".join(f'{{"table": "t{t}", "n": {n}}}' for n in range(300)) for t in range(2)]
    frame = current_row_lines(spark, texts, limit=2000)
    assert frame._jdf.rdd().getNumPartitions() == len(text_chunks(texts, 2000)) > 2
    assert sorted(row["line"] for row in frame.collect()) == sorted(line for text in texts for line in text.split("\n"))
