"""Request verification and response signing, byte-compatible with the official SDK (`tablestore/auth.py`).

Research notes §1.2-1.3 (VERIFIED recipes): a request is signed over "/<Api>\nPOST\n\n<x-ots-* headers>\n" with
HMAC-SHA1 of the secret (V2) or HMAC-SHA256 of a derived key (V4, plus the salt "ots"); the response is always
signed with HMAC-SHA1 over "<x-ots-* headers>\n/<Api>", keyed by the secret (V2) or the same derived key (V4).
Optionally the instance has a region (a V4 signature for another region is refused, as the real service refuses it)
and STS credentials (every request must carry their token; without them, a request carrying a token is refused).
Secrets and tokens are used here and never logged nor echoed in errors.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from cdcbridge.emulator.errors import AuthFailed

#: Requests whose x-ots-date is further than this from the server clock are refused (replay window).
MAX_CLOCK_SKEW_S = 15 * 60
_SIGNATURE_HEADERS = frozenset({"x-ots-signature", "x-ots-signaturev4"})


@dataclass(frozen=True, slots=True)
class VerifiedRequest:
    """Who sent a request and the key its response must be signed with."""

    access_key_id: str
    signing_key: bytes


def canonical_headers(headers: Mapping[str, str]) -> str:
    """The SDK's `_make_headers_string`: sorted "name:value" lines of the x-ots-* headers."""
    return "\n".join(
        sorted(
            f"{name.lower()}:{value.strip()}" for name, value in headers.items() if name.lower().startswith("x-ots-")
        )
    )


@lru_cache(maxsize=256)
def v4_signing_key(secret: str, sign_date: str, region: str) -> bytes:
    """The SDK's `SignV4._get_v4_signing_key`: the base64 *text* of the last HMAC is the key."""
    key = hmac.new(("aliyun_v4" + secret).encode(), sign_date.encode(), hashlib.sha256).digest()
    key = hmac.new(key, region.encode(), hashlib.sha256).digest()
    key = hmac.new(key, b"ots", hashlib.sha256).digest()
    key = hmac.new(key, b"aliyun_v4_request", hashlib.sha256).digest()
    return base64.b64encode(key)


def _b64_hmac(key: bytes, text: str, digest: str) -> str:
    return base64.b64encode(hmac.new(key, text.encode("utf-8"), digest).digest()).decode("ascii")


def request_signature_string(api_name: str, headers: Mapping[str, str]) -> str:
    signed = {k: v for k, v in headers.items() if k.lower() not in _SIGNATURE_HEADERS}
    return f"/{api_name}\nPOST\n\n{canonical_headers(signed)}\n"


def content_md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode("ascii")


@lru_cache(maxsize=64)
def _parse_request_date(text: str) -> float:
    try:
        parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError as exc:
        raise AuthFailed(f"Invalid x-ots-date {text!r}: expected e.g. 2024-01-01T00:00:00.000Z.") from exc
    return calendar.timegm(parsed.timetuple()) + parsed.microsecond / 1e6


class RequestVerifier:
    """Checks md5, date window, STS token and signature of a request against known credentials {access key id:
    secret}. `region` None accepts V4 signatures for any region; `sts_token` None means permanent credentials."""

    def __init__(
        self,
        credentials: Mapping[str, str],
        *,
        region: str | None = None,
        sts_token: str | None = None,
        clock_s: Callable[[], float] = time.time,
    ) -> None:
        self._credentials = dict(credentials)
        self._region = region or None
        self._sts_token = sts_token or None
        self._clock_s = clock_s

    def verify(self, api_name: str, headers: Mapping[str, str], body: bytes) -> VerifiedRequest:
        """`headers` must have lowercase names. Raises AuthFailed naming what is wrong (never the secret)."""
        access_key_id = headers.get("x-ots-accesskeyid")
        if not access_key_id:
            raise AuthFailed("Missing header x-ots-accesskeyid.")
        secret = self._credentials.get(access_key_id)
        if secret is None:
            raise AuthFailed(f"Unknown access key id {access_key_id!r}.")
        md5 = headers.get("x-ots-contentmd5")
        if md5 is None:
            raise AuthFailed("Missing header x-ots-contentmd5.")
        if md5 != content_md5(body):
            raise AuthFailed("Mismatch between x-ots-contentmd5 and the request body.")
        date = headers.get("x-ots-date")
        if date is None:
            raise AuthFailed("Missing header x-ots-date.")
        skew = abs(self._clock_s() - _parse_request_date(date))
        if skew > MAX_CLOCK_SKEW_S:
            raise AuthFailed(
                f"x-ots-date {date} is {int(skew)} s away from the server time (at most {MAX_CLOCK_SKEW_S} s allowed)."
            )
        self._check_sts_token(headers.get("x-ots-ststoken"))
        string_to_sign = request_signature_string(api_name, headers)
        v4_signature = headers.get("x-ots-signaturev4")
        if v4_signature is not None:
            sign_date = headers.get("x-ots-signdate")
            region = headers.get("x-ots-signregion")
            if not sign_date or not region:
                raise AuthFailed("A V4 signature needs the headers x-ots-signdate and x-ots-signregion.")
            if self._region is not None and region != self._region:
                raise AuthFailed(
                    f"Signature mismatch: the request is signed (V4) for region {region!r}, this instance is in "
                    f"region {self._region!r}. Set the client's region to {self._region!r}."
                )
            key = v4_signing_key(secret, sign_date, region)
            expected = _b64_hmac(key, string_to_sign + "ots", "sha256")
            given = v4_signature
        else:
            given = headers.get("x-ots-signature")
            if given is None:
                raise AuthFailed("Missing header x-ots-signature (or x-ots-signaturev4).")
            key = secret.encode("utf-8")
            expected = _b64_hmac(key, string_to_sign, "sha1")
        if not _same_signature(given, expected):
            raise AuthFailed("Signature mismatch.")
        return VerifiedRequest(access_key_id, key)

    def _check_sts_token(self, token: str | None) -> None:
        if self._sts_token is None:
            if token is not None:
                raise AuthFailed(
                    "The request carries an STS token (x-ots-ststoken) but the emulator's access key is a permanent "
                    "one: drop the token from the client, or start the emulator with --sts-token."
                )
            return
        if token is None or not _same_signature(token, self._sts_token):
            raise AuthFailed(
                "The STS token (x-ots-ststoken) is missing or is not the emulator's --sts-token: temporary "
                "credentials are valid only together with their own token."
            )


def _same_signature(given: str, expected: str) -> bool:
    try:
        return hmac.compare_digest(given.encode("ascii"), expected.encode("ascii"))
    except (UnicodeEncodeError, binascii.Error):
        return False


def response_authorization(api_name: str, headers: Mapping[str, str], verified: VerifiedRequest) -> str:
    """The `Authorization` value for a response whose final x-ots-* headers are `headers` (always HMAC-SHA1)."""
    signature = _b64_hmac(verified.signing_key, f"{canonical_headers(headers)}\n/{api_name}", "sha1")
    return f"OTS {verified.access_key_id}:{signature}"


def response_date(now_s: float) -> str:
    """x-ots-date of a response: UTC with six fractional digits, as the real service sends."""
    return datetime.fromtimestamp(now_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
