"""The bridge: a record processor wiring coordination, formats and the Kafka sink."""
