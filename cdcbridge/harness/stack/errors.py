"""Errors of the local stack; each message is one line naming the cause and where to look."""


class StackError(Exception):
    """A local-stack service could not be prepared, started, reached or stopped."""
