"""Lease model, the LeaseStore interface and its stores, renewer, taker and shard syncer (KCL leases/)."""
