"""What coordination needs from a change stream, and an in-memory simulator of one."""
