"""Checkpoint positions and the per-shard checkpointer (KCL checkpoint/)."""
