"""A local emulator of the Tablestore wire protocol, so the official SDK (and our code) runs unchanged against it.

Model (no wire format): `model` (instance, tables, rows, writes, reads), `keys` (primary-key schema and order),
`conditions` (conditional writes and filters), `streams` (shards, records, lineage, iterators), `errors`.
Around it: `backend` (lock + clock + `journal` for --data-dir), `protocol` (protobuf/PlainBuffer <-> model),
`signing` (request checks, response signatures), `faults` (injection), `server` (HTTP, admin endpoints,
`EmulatorServer`, `serve_forever_cli`).
"""
