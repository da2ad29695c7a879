"""What the bridge workers and the snapshot export share to publish a table's records: the tables' topics and
schemas (tables.py), the partition counts recorded per topic (topic_record.py), and the record encoder."""
