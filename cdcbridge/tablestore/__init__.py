"""cdcbridge.tablestore."""
