"""The local stack: Apache Kafka (KRaft), Apicurio Registry and the Tablestore emulator as plain processes.

There is no Docker engine on our machines, so `cdcbridge stack up`, the tests and the demo start the same services
that docker-compose.yml runs for users, from Maven Central artifacts, as background processes on loopback;
:mod:`.spark` fills in the local Spark environment (connector jars, a JDK) that `apply.spark` leaves unset.
"""

from cdcbridge.harness.stack.errors import StackError

__all__ = ["StackError"]
