"""Secret redaction for anything that leaves the process as text: log lines, error messages, ``status`` output.

Two nets: the exact values the process knows are secret (registered at start: access key secret, STS token, SASL
password, registry basic-auth info, database password), and the shapes secrets take in text whatever their value
(``password=...``, ``"secret": "..."``, ``scheme://user:pass@host``, ``Authorization: OTS id:signature``). Both are
replaced with ``***``.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable
from typing import Protocol
from urllib.parse import parse_qsl, quote, urlsplit

__all__ = [
    "MASK",
    "MIN_SECRET_LENGTH",
    "SecretRedactor",
    "default_redactor",
    "is_secret_setting",
    "redact",
    "register_connection_secret",
    "register_secret",
]

MASK = "***"
#: Shorter values are not registered: masking every "ab" in every line would make logs unreadable. Such values are
#: still caught by the shape patterns wherever they appear as ``password=...``.
MIN_SECRET_LENGTH = 4


class _RevealsSecret(Protocol):
    """pydantic's SecretStr, without importing pydantic here."""

    def get_secret_value(self) -> str: ...


# Key names that hold secrets: the key ends in one of these words (sasl.password, access_key_secret, x-ots-ststoken,
# basic.auth.user.info, AccessKeySecret, api_key, Hadoop's fs.s3a.secret.key / access.key / session.token,
# aws_secret_access_key ...). Written as a possessive run of key characters checked by look-behinds, so matching
# stays linear in the line length whatever the line holds.
_SECRET_KEY_ENDINGS = (
    "password",
    "passwd",
    "secret",
    "token",
    "signature",
    "signaturev4",
    *(f"{word}{sep}key" for word in ("api", "private", "secret", "access") for sep in ("", "_", "-", ".")),
    "credential",
    "credentials",
    *(f"user{sep}info" for sep in ("", "_", "-", ".")),
)
_SECRET_KEY = r"[\w.-]++(?:" + "|".join(f"(?<={re.escape(word)})" for word in _SECRET_KEY_ENDINGS) + ")"
_IS_SECRET_KEY = re.compile(rf"{_SECRET_KEY}$", re.IGNORECASE)
_UNQUOTED_VALUE = r"[^\s\"'&,;)}\]\\]+"
_QUOTED_VALUE = r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'"


def _mask_value(match: re.Match[str]) -> str:
    """Keep the key and the value's quotes (so JSON stays JSON), mask what is between them."""
    value = match.group("value")
    quote_char = value[0] if value[:1] in {'"', "'"} and len(value) >= 2 and value[-1] == value[0] else ""
    return f"{match.group('key')}{quote_char}{MASK}{quote_char}"


_PATTERNS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # Authorization headers: keep the scheme, mask the credentials (OTS id:signature, Basic b64, Bearer token).
    (
        re.compile(
            r"(?P<head>\bauthorization[\"']?\s*[:=]\s*[\"']?)(?P<scheme>(?:OTS|Basic|Bearer|Digest)\s+)?"
            r"[^\s\"',;}\\]+",
            re.IGNORECASE,
        ),
        rf"\g<head>\g<scheme>{MASK}",
    ),
    # A bare Tablestore signature anywhere: "OTS <access key id>:<base64 signature>".
    (re.compile(r"\bOTS [\w-]+:[A-Za-z0-9+/=]+"), f"OTS {MASK}"),
    # Userinfo in URLs: http://user:pass@host, postgresql://u:p@h/db, https://token@host.
    (re.compile(r"(?P<scheme>\b[a-zA-Z][\w+.-]{0,31}://)[^\s/@\"'\\]+@"), rf"\g<scheme>{MASK}@"),
    # Quoted keys with ':' or '=' (dict reprs, JSON, header dumps): 'sasl.password': 'x', "secret": "y".
    (
        re.compile(
            rf"(?P<key>(?P<kq>[\"']){_SECRET_KEY}(?P=kq)\s*[:=]\s*)(?P<value>{_QUOTED_VALUE}|{_UNQUOTED_VALUE})",
            re.IGNORECASE,
        ),
        _mask_value,
    ),
    # YAML lines (a config snippet in a parse error, a dumped config): `  sasl_password: x` masks the rest of the line.
    (
        re.compile(rf"(?P<key>^[ \t]*(?:-[ \t]+)?{_SECRET_KEY}[ \t]*:[ \t]+)(?P<value>[^\n]*[^\s])", re.I | re.M),
        _mask_value,
    ),
    # YAML flow mappings: {sasl_password: x, user: y}.
    (
        re.compile(
            rf"(?P<key>(?<=[{{,])[ \t]*{_SECRET_KEY}[ \t]*:[ \t]+)(?P<value>{_QUOTED_VALUE}|{_UNQUOTED_VALUE})", re.I
        ),
        _mask_value,
    ),
    # Bare keys with '=' (kwargs reprs, libpq DSNs, properties, query strings): password=x, sasl.password=y.
    (
        re.compile(
            rf"(?P<key>(?<![\w.-]){_SECRET_KEY}\s*=\s*)(?P<value>{_QUOTED_VALUE}|{_UNQUOTED_VALUE})", re.IGNORECASE
        ),
        _mask_value,
    ),
)


_MAY_HOLD_SHAPED_SECRET = re.compile(
    r"password|passwd|secret|token|signature|api[._-]?key|private[._-]?key|access[._-]?key|credential|user[._-]?info"
    r"|authorization"
    r"|OTS |://",
    re.IGNORECASE,
)


def _encoded_forms(secret: str) -> set[str]:
    """The secret as it may appear once escaped or encoded by whoever wrote the text."""
    forms = {
        secret,
        json.dumps(secret)[1:-1],  # JSON log output
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],  # dict / exception reprs
        quote(secret, safe=""),  # URL userinfo and query strings
        quote(secret, safe="/:@"),
        base64.b64encode(secret.encode()).decode(),  # HTTP Basic
    }
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


class SecretRedactor:
    """Masks registered secret values and secret-shaped text. Thread-safe; registration is rare, redaction hot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        self._forms: set[str] = set()
        self._secret_pattern: re.Pattern[str] | None = None

    def register(self, value: str | _RevealsSecret | None) -> bool:
        """Mask ``value`` (str or SecretStr) from now on; returns False for None, blank or too-short values."""
        if value is None:
            return False
        secret = value if isinstance(value, str) else value.get_secret_value()
        if len(secret.strip()) < MIN_SECRET_LENGTH:
            return False
        with self._lock:
            if secret in self._secrets:
                return True
            self._secrets.add(secret)
            self._forms |= _encoded_forms(secret)
            # Longest first, so a secret that contains another is masked whole.
            alternatives = sorted(self._forms, key=len, reverse=True)
            self._secret_pattern = re.compile("|".join(re.escape(form) for form in alternatives))
        return True

    def register_connection(self, value: str | _RevealsSecret | None) -> bool:
        """Register a connection secret and the password inside it: a URL's userinfo password, a libpq
        ``password=`` keyword, or the password half of ``user:password`` (registry basic-auth info)."""
        if value is None:
            return False
        text = value if isinstance(value, str) else value.get_secret_value()
        registered = self.register(text)
        for password in _passwords_in(text):
            registered = self.register(password) or registered
        return registered

    def clear(self) -> None:
        """Forget every registered secret (tests; a process keeps its secrets for its lifetime)."""
        with self._lock:
            self._secrets.clear()
            self._forms.clear()
            self._secret_pattern = None

    def redact(self, text: str) -> str:
        """``text`` with every registered secret and every secret-shaped value replaced by ``***``."""
        pattern = self._secret_pattern
        if pattern is not None:
            text = pattern.sub(MASK, text)
        if _MAY_HOLD_SHAPED_SECRET.search(text):  # one linear scan spares most lines the patterns below
            for shape, replacement in _PATTERNS:
                text = shape.sub(replacement, text)
        return text


def _passwords_in(text: str) -> list[str]:
    text = text.strip()
    found: list[str] = []
    if "://" in text:
        try:
            url = urlsplit(text)
            found.append(url.password or "")
        except ValueError:
            return []
        found.extend(value for key, value in parse_qsl(url.query) if key == "password")
    elif keyword := re.search(r"\bpassword\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))", text):
        found.append(keyword.group(1) or keyword.group(2) or "")
    elif ":" in text and not any(ch.isspace() for ch in text):
        found.append(text.split(":", 1)[1])
    return [password for password in found if password]


#: The process-wide redactor used by the logging filter and by :func:`redact`.
default_redactor = SecretRedactor()


def register_secret(value: str | _RevealsSecret | None) -> bool:
    """Mask this exact value (str or SecretStr) in every log line and in :func:`redact` from now on."""
    return default_redactor.register(value)


def register_connection_secret(value: str | _RevealsSecret | None) -> bool:
    """Like :func:`register_secret`, and also mask the password inside a DSN, URL or ``user:password`` pair."""
    return default_redactor.register_connection(value)


def is_secret_setting(name: str) -> bool:
    """Whether a setting's name says its value is a secret (``spark.hadoop.fs.s3a.secret.key``, ``sasl.password``):
    such values of free-form settings (``apply.spark.conf``) are registered like the configuration's secrets."""
    return _IS_SECRET_KEY.match(name.strip()) is not None


def redact(text: str) -> str:
    """Mask secrets in text that leaves the process other than through logging (error messages, ``status``)."""
    return default_redactor.redact(text)
