"""The local stack: Apache Kafka (KRaft), Apicurio Registry and the Tablestore emulator as plain processes.

There is no Docker engine on our machines, so `cdcbridge stack up`, the tests and the demo start the same services
that docker-compose.yml runs for users, from Maven Central artifacts, as background processes on loopback.
"""

from cdcbridge.harness.stack.errors import StackError

__all__ = ["StackError"]
