"""The TCP proxy moved into the package (the chaos suite uses it for registry outages); re-exported for the tests."""

from cdcbridge.harness.chaos.tcp_proxy import TcpProxy

__all__ = ["TcpProxy"]
