"""Notices our dependencies print by themselves that tell a cdcbridge user nothing they can act on.

Installed once, by the package's ``__init__``, before any dependency is imported: the tablestore SDK logs "Native C++
encoder not available, using Python implementation" at import (we decode stream records ourselves and do not need its
native codec), and authlib warns that its httpx integration is deprecated each time confluent-kafka's registry client
is imported. Each is silenced by its exact text, so every other warning and log line of those libraries still shows.
Standard library only: this runs on every ``import cdcbridge``.
"""

from __future__ import annotations

import logging
import re
import warnings

#: The tablestore SDK's import-time notices about its optional native codec (tablestore.encoder / .decoder).
_NATIVE_CODEC_NOTICE = re.compile(r"^Native .* (not available|not found), using Python implementation$")
_NATIVE_CODEC_LOGGERS = ("tablestore.encoder", "tablestore.decoder")
#: authlib's warning, raised when confluent-kafka's schema-registry client imports authlib's httpx integration.
_HTTPX_DEPRECATION = "The httpx module is deprecated"


class _DropNativeCodecNotice(logging.Filter):
    """Drops only the native-codec notice; anything else those SDK loggers say passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _NATIVE_CODEC_NOTICE.match(record.getMessage())


def silence_dependency_notices() -> None:
    """Install the filters; idempotent, and safe before or after the dependencies are imported."""
    for name in _NATIVE_CODEC_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropNativeCodecNotice) for f in logger.filters):
            logger.addFilter(_DropNativeCodecNotice())
    try:
        # Importing authlib.deprecate puts an "always" filter for authlib's warnings at the front of the list; ours
        # must go in front of it, so it is added after that import.
        from authlib.deprecate import AuthlibDeprecationWarning
    except ImportError:  # authlib comes with confluent-kafka's registry client; without it there is nothing to hide
        return
    warnings.filterwarnings("ignore", message=_HTTPX_DEPRECATION, category=AuthlibDeprecationWarning)
