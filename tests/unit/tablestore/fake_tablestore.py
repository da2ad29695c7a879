"""A scripted in-process Tablestore endpoint, so unit tests drive the real SDK request path over real HTTP.

It verifies request signatures (V2 and V4) with its own implementation of the protocol, signs its responses the way
the SDK checks them, and answers each API with whatever the test scripted. It has no data model: tests say what each
call returns and then inspect the requests the SDK sent.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import tablestore.protobuf.table_store_pb2 as sdk_pb2
from google.protobuf.message import Message

Reply = tuple[int, bytes]  # HTTP status, body
#: A scripted reply that closes the connection without answering (a lost response).
DROP = (0, b"")


@dataclass
class SeenRequest:
    api: str
    headers: dict[str, str]
    body: bytes

    def parse(self, message_type: type[Message]) -> Message:
        message = message_type()
        message.ParseFromString(self.body)
        return message


def error_reply(status: int, code: str, message: str = "") -> Reply:
    return status, sdk_pb2.Error(code=code, message=message).SerializeToString()


def ok(message: Message) -> Reply:
    return 200, message.SerializeToString()


class FakeTablestore:
    """Scripted endpoint. `script(api, *replies)` queues replies (a Reply or a callable taking the request);
    the last queued reply repeats once the queue is down to one."""

    def __init__(self, credentials: dict[str, str] | None = None) -> None:
        self.credentials = credentials or {"test-id": "test-secret"}
        self.requests: list[SeenRequest] = []
        self._scripts: dict[str, deque[Reply | Callable[[SeenRequest], Reply]]] = {}
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                fake._handle(self, body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeTablestore:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def script(self, api: str, *replies: Reply | Callable[[SeenRequest], Reply]) -> None:
        with self._lock:
            self._scripts[api] = deque(replies)

    def seen(self, api: str) -> list[SeenRequest]:
        return [request for request in self.requests if request.api == api]

    # -- protocol ------------------------------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        api = handler.path.rstrip("/").rsplit("/", 1)[-1]
        headers = {name.lower(): value for name, value in handler.headers.items()}
        request = SeenRequest(api, headers, body)
        with self._lock:
            self.requests.append(request)
        signing_key = self._verify(api, headers, body)
        if signing_key is None:
            self._send(handler, api, headers, *error_reply(403, "OTSAuthFailed", "Signature mismatch."), key=None)
            return
        with self._lock:
            queue = self._scripts.get(api)
            if not queue:
                reply: Reply | Callable[[SeenRequest], Reply] = error_reply(405, "OTSMethodNotAllowed", api)
            else:
                reply = queue.popleft() if len(queue) > 1 else queue[0]
        status, payload = reply(request) if callable(reply) else reply
        if (status, payload) == DROP:
            handler.close_connection = True
            return
        self._send(handler, api, headers, status, payload, key=signing_key)

    def _verify(self, api: str, headers: dict[str, str], body: bytes) -> bytes | None:
        """The key to sign the response with, or None when the request is not signed with a known secret."""
        secret = self.credentials.get(headers.get("x-ots-accesskeyid", ""))
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
        if secret is None or headers.get("x-ots-contentmd5") != md5:
            return None
        signed = {k: v for k, v in headers.items() if k.startswith("x-ots-") and k not in _SIGNATURE_HEADERS}
        canonical = f"/{api}\nPOST\n\n" + "\n".join(sorted(f"{k}:{v.strip()}" for k, v in signed.items())) + "\n"
        if "x-ots-signaturev4" in headers:
            key = _v4_key(secret, headers.get("x-ots-signdate", ""), headers.get("x-ots-signregion", ""))
            expected = _b64_hmac(key, canonical + "ots", hashlib.sha256)
            return key if hmac.compare_digest(expected, headers["x-ots-signaturev4"]) else None
        expected = _b64_hmac(secret.encode(), canonical, hashlib.sha1)
        return secret.encode() if hmac.compare_digest(expected, headers.get("x-ots-signature", "")) else None

    def _send(
        self,
        handler: BaseHTTPRequestHandler,
        api: str,
        request_headers: dict[str, str],
        status: int,
        body: bytes,
        *,
        key: bytes | None,
    ) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        ots_headers = {
            "x-ots-contentmd5": base64.b64encode(hashlib.md5(body).digest()).decode(),
            "x-ots-requestid": uuid.uuid4().hex,
            "x-ots-date": now,
            "x-ots-contenttype": "protocol buffer",
        }
        handler.send_response(status)
        for name, value in ots_headers.items():
            handler.send_header(name, value)
        if key is not None:
            signed = "\n".join(sorted(f"{k}:{v}" for k, v in ots_headers.items())) + f"\n/{api}"
            akid = request_headers.get("x-ots-accesskeyid", "")
            handler.send_header("Authorization", f"OTS {akid}:{_b64_hmac(key, signed, hashlib.sha1)}")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)


_SIGNATURE_HEADERS = {"x-ots-signature", "x-ots-signaturev4"}


def _b64_hmac(key: bytes, text: str, digest: Callable[..., object]) -> str:
    return base64.b64encode(hmac.new(key, text.encode(), digest).digest()).decode()


def _v4_key(secret: str, date: str, region: str) -> bytes:
    key = ("aliyun_v4" + secret).encode()
    for part in (date, region, "ots", "aliyun_v4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return base64.b64encode(key)
