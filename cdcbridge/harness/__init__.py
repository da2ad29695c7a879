"""Tools to develop, demonstrate, benchmark and torture the product: local stack, demo, bench, chaos.

Nothing in the product imports this package; only `cdcbridge.cli` does (tests/unit/test_product_imports.py checks it).
"""
