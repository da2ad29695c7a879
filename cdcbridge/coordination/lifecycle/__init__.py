"""The shard consumer state machine and its tasks (KCL lifecycle/)."""
