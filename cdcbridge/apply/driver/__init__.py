"""The reference path: one micro-batch applied on the driver with the pure core, record by record."""
