"""cdcbridge: Tablestore change streams to Kafka (Avro), applied downstream by Spark."""

__version__ = "0.1.0"
