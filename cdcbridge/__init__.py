"""cdcbridge: Tablestore change streams to Kafka (Avro), applied downstream by Spark."""

from cdcbridge.observability.dependency_noise import silence_dependency_notices

__version__ = "0.1.0"

# Before any dependency is imported: the tablestore SDK and authlib print notices at import (see the module).
silence_dependency_notices()
