"""Finds the optional C accelerator (`_speedups`, built from _speedups.c at install time).

Without a compiler the package still works on the pure-Python reader, only slower. Setting the environment
variable CDCBRIDGE_PURE_PYTHON=1 forces the pure-Python path, e.g. to rule the accelerator out when debugging.
"""

from __future__ import annotations

import os
from types import ModuleType

from cdcbridge.tablestore.plainbuffer.errors import PlainBufferError
from cdcbridge.tablestore.plainbuffer.rows import AUTO_INCREMENT, INF_MAX, INF_MIN

FORCE_PURE_PYTHON_ENV = "CDCBRIDGE_PURE_PYTHON"


def _load() -> ModuleType | None:
    if os.environ.get(FORCE_PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from cdcbridge.tablestore.plainbuffer import _speedups  # type: ignore[attr-defined]
    except ImportError:
        return None
    _speedups.configure(PlainBufferError, INF_MIN, INF_MAX, AUTO_INCREMENT)
    return _speedups


#: The C module, or None when it is not built (or disabled by CDCBRIDGE_PURE_PYTHON).
speedups: ModuleType | None = _load()
#: "c" or "python": which reader decode_row/decode_rows/decode_stream_record run on.
IMPLEMENTATION = "c" if speedups is not None else "python"
