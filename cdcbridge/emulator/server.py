"""HTTP front of the emulator (moto's `urls.py` + server): routing, request checks, signed answers, admin JSON.

`POST /<ApiName>` runs a Tablestore API; the whole path names it, as the service and the SDKs sign it (the Tunnel
APIs are `/tunnel/create` ..., answered `OTSUnsupportOperation`):
the request's md5, date window and V2/V4 signature are checked (403 OTSAuthFailed, unsigned, on failure), the
answer carries x-ots-contentmd5 / -requestid / -date / -contenttype and an Authorization signed the way the SDK
verifies it. Admin endpoints on the same port take and return JSON and need no signature:

- `GET /_emulator/health` → `{"status": "ok", "tables": N}`
- `GET /_emulator/stats` → `{"<Api>": {"calls": N, "seconds": S}}` (server-side handling time, no HTTP)
- `POST /_emulator/split` `{"table", "shard_id"}` → `{"children": [id, id]}`
- `POST /_emulator/merge` `{"table", "shard_id", "sibling_shard_id"}` → `{"child": id}`
- `POST /_emulator/trim` `{"table", "before_ms"}` → `{"dropped": N}`
- `GET | POST | DELETE /_emulator/faults` → `{"rules": [...]}` (schema in faults.py)

Admin errors answer `{"error": message, "code": code}` with a 4xx status.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

import tablestore.protobuf.table_store_pb2 as pb2

from cdcbridge.emulator.backend import Backend, wall_clock_us
from cdcbridge.emulator.errors import (
    AuthFailed,
    EmulatorError,
    MethodNotAllowed,
    ParameterInvalid,
    UnsupportOperation,
    error_for_code,
)
from cdcbridge.emulator.faults import FaultConfigError, FaultInjector
from cdcbridge.emulator.journal import JournalError
from cdcbridge.emulator.limits import MAX_REQUEST_BODY_BYTES, Limits
from cdcbridge.emulator.protocol import ProtocolHandler
from cdcbridge.emulator.signing import (
    RequestVerifier,
    VerifiedRequest,
    content_md5,
    response_authorization,
    response_date,
)

log = logging.getLogger(__name__)

DEFAULT_PORT = 8900
DEFAULT_CREDENTIALS = {"emulator-id": "emulator-secret"}
#: Requests larger than this are refused with 413 OTSRequestBodyTooLarge (the documented 5 MiB).
MAX_BODY_BYTES = MAX_REQUEST_BODY_BYTES
ADMIN_PREFIX = "/_emulator/"


class EmulatorStartError(Exception):
    """The emulator cannot start (port taken, data directory unusable); the message says what to change."""


class ApiStats:
    """Calls and handling time per API (server side only, without HTTP), for benchmarks and `GET /_emulator/stats`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, list[float]] = {}

    def record(self, api_name: str, seconds: float) -> None:
        with self._lock:
            total = self._totals.setdefault(api_name, [0, 0.0])
            total[0] += 1
            total[1] += seconds

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {api: {"calls": int(c), "seconds": round(s, 6)} for api, (c, s) in sorted(self._totals.items())}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True
    emulator: EmulatorServer


class _Handler(BaseHTTPRequestHandler):
    """One connection; HTTP/1.1 keep-alive. Each answer goes out in a single write (no Nagle stalls)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # -- plumbing -------------------------------------------------------------------------------------------------

    def _send(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        lines = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.wfile.write(head + body)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise EmulatorError("The size of POST data is too large.", code="OTSRequestBodyTooLarge")
        return self.rfile.read(length) if length else b""

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    # -- Tablestore answers ---------------------------------------------------------------------------------------

    def _send_ots(self, api_name: str, status: int, body: bytes, verified: VerifiedRequest | None) -> None:
        headers = {
            "x-ots-contentmd5": content_md5(body),
            "x-ots-requestid": uuid.uuid4().hex,
            "x-ots-date": response_date(time.time()),
            "x-ots-contenttype": "protocol buffer",
        }
        if verified is not None:
            headers["Authorization"] = response_authorization(api_name, headers, verified)
        self._send(status, headers, body)

    def _send_ots_error(self, api_name: str, error: EmulatorError, verified: VerifiedRequest | None) -> None:
        body = pb2.Error(code=error.code, message=error.message).SerializeToString()
        # The SDK never checks the signature of a 403 OTSAuthFailed, and the service sends none.
        self._send_ots(api_name, error.http_status, body, None if isinstance(error, AuthFailed) else verified)

    def _handle_api(self, api_name: str) -> None:
        emulator = self.server.emulator
        verified = None
        try:
            body = self._read_body()
            verified = emulator.verifier.verify(api_name, _lower(self.headers), body)
            if api_name not in emulator.protocol.handlers:
                raise UnsupportOperation(f"Unsupported operation: '{api_name}'.")
            fault = emulator.faults.pick(api_name)
            if fault is not None:
                if fault.latency_ms:
                    time.sleep(fault.latency_ms / 1000)
                if fault.error_code:
                    raise error_for_code(fault.error_code, fault.error_message)
                if fault.drop_response:
                    self._apply_and_drop(api_name, body)
                    return
            started = time.perf_counter()
            answer = emulator.protocol.handle(api_name, body)
            emulator.stats.record(api_name, time.perf_counter() - started)
        except EmulatorError as error:
            self._send_ots_error(api_name, error, verified)
            return
        except Exception:
            log.exception("internal error while handling %s", api_name)
            self._send_ots_error(api_name, EmulatorError("Internal server error."), verified)
            return
        self._send_ots(api_name, 200, answer, verified)

    def _apply_and_drop(self, api_name: str, body: bytes) -> None:
        """Run the call (its outcome, even an error, stays unknown to the client), then cut the connection."""
        try:
            self.server.emulator.protocol.handle(api_name, body)
        except EmulatorError:
            pass
        finally:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    # -- admin ----------------------------------------------------------------------------------------------------

    def _send_json(self, status: int, payload: Any) -> None:
        self._send(status, {"Content-Type": "application/json"}, json.dumps(payload).encode())

    def _handle_admin(self, method: str) -> None:
        emulator = self.server.emulator
        route = self._path()[len(ADMIN_PREFIX) :].strip("/")
        try:
            body = self._read_body()
            payload = json.loads(body) if body.strip() else {}
            handler = emulator.admin_routes.get((method, route))
            if handler is None:
                self._send_json(
                    404, {"error": f"No admin endpoint {method} {ADMIN_PREFIX}{route}.", "code": "NotFound"}
                )
                return
            self._send_json(200, handler(payload))
        except (json.JSONDecodeError, FaultConfigError, KeyError, TypeError, ValueError) as exc:
            message = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            self._send_json(400, {"error": message, "code": "BadRequest"})
        except EmulatorError as error:
            self._send_json(error.http_status, {"error": error.message, "code": error.code})
        except Exception:
            log.exception("internal error in admin endpoint %s %s", method, route)
            self._send_json(500, {"error": "Internal error; see the emulator log.", "code": "InternalError"})

    # -- verbs ----------------------------------------------------------------------------------------------------

    def do_POST(self) -> None:
        path = self._path()
        if path.startswith(ADMIN_PREFIX):
            self._handle_admin("POST")
        else:
            self._handle_api(_api_name(path))

    def _other_verb(self, method: str) -> None:
        if self._path().startswith(ADMIN_PREFIX):
            self._handle_admin(method)
            return
        with contextlib.suppress(EmulatorError):
            self._read_body()
        api_name = _api_name(self._path())
        self._send_ots_error(api_name, MethodNotAllowed("Only POST method for requests is supported."), None)

    def do_GET(self) -> None:
        self._other_verb("GET")

    def do_DELETE(self) -> None:
        self._other_verb("DELETE")

    def do_PUT(self) -> None:
        self._other_verb("PUT")


def _api_name(path: str) -> str:
    """The API a path names: all of it after the leading slash (`/tunnel/create` is "tunnel/create")."""
    return path.strip("/")


def _lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


class EmulatorServer:
    """The emulator in a background thread (tests, `cdcbridge demo`), or in the foreground via the CLI.

    >>> server = EmulatorServer().start()   # port=0 picks a free port
    >>> OTSClient(server.url, "emulator-id", "emulator-secret", "any-instance")
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: str | None = None,
        credentials: Mapping[str, str] | None = None,
        increments_as_deltas: bool = False,
        *,
        region: str | None = None,
        sts_token: str | None = None,
        limits: Limits | None = None,
        clock_us: Callable[[], int] = wall_clock_us,
    ) -> None:
        self.host = host
        try:
            self.backend = Backend(
                data_dir=data_dir, increments_as_deltas=increments_as_deltas, limits=limits, clock_us=clock_us
            )
        except (OSError, JournalError) as exc:
            raise EmulatorStartError(f"Cannot use data directory {data_dir!r}: {exc}") from exc
        self.protocol = ProtocolHandler(self.backend)
        self.region = region
        self.verifier = RequestVerifier(
            credentials if credentials is not None else DEFAULT_CREDENTIALS, region=region, sts_token=sts_token
        )
        self.faults = FaultInjector(self.protocol.api_names)
        self.stats = ApiStats()
        self.admin_routes: dict[tuple[str, str], Callable[[Any], Any]] = {
            ("GET", "health"): self._health,
            ("GET", "stats"): lambda _: self.stats.snapshot(),
            ("POST", "split"): self._split,
            ("POST", "merge"): self._merge,
            ("POST", "trim"): self._trim,
            ("GET", "faults"): lambda _: {"rules": self.faults.describe()},
            ("POST", "faults"): lambda body: {"rules": self.faults.configure(body)},
            ("DELETE", "faults"): self._clear_faults,
        }
        try:
            self._httpd = _Server((host, port), _Handler)
        except OSError as exc:
            self.backend.close()
            raise EmulatorStartError(
                f"Cannot listen on {host}:{port}: {exc.strerror or exc}. Is another emulator running there? "
                "Choose another --port."
            ) from exc
        self._httpd.emulator = self
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def instance(self) -> Any:
        """The model behind the server, for tests that inspect state directly."""
        return self.backend.instance

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- admin handlers -------------------------------------------------------------------------------------------

    def _health(self, _: Any) -> dict[str, Any]:
        return {"status": "ok", "tables": len(self.backend.call("list_tables"))}

    def _split(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return {"children": self.backend.call("split_shard", _text(body, "table"), _text(body, "shard_id"))}

    def _merge(self, body: Mapping[str, Any]) -> dict[str, Any]:
        child = self.backend.call(
            "merge_shards", _text(body, "table"), _text(body, "shard_id"), _text(body, "sibling_shard_id")
        )
        return {"child": child}

    def _trim(self, body: Mapping[str, Any]) -> dict[str, Any]:
        before_ms = body["before_ms"]
        if type(before_ms) is not int:
            raise ParameterInvalid("before_ms must be an integer (ms since the epoch).")
        return {"dropped": self.backend.call("trim_stream", _text(body, "table"), before_ms)}

    def _clear_faults(self, _: Any) -> dict[str, Any]:
        self.faults.clear()
        return {"rules": []}

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def start(self) -> EmulatorServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="tablestore-emulator", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        """Stop serving, close the socket and write the final snapshot (with a data_dir). Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()
        self.backend.close()

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _text(body: Mapping[str, Any], field: str) -> str:
    value = body[field]
    if not isinstance(value, str):
        raise ParameterInvalid(f"{field} must be a string.")
    return value


def serve_forever_cli(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    data_dir: str | None = None,
    access_key_id: str = "emulator-id",
    access_key_secret: str = "emulator-secret",
    increments_as_deltas: bool = False,
    region: str | None = None,
    sts_token: str | None = None,
) -> None:
    """Run the emulator in the foreground until SIGINT / SIGTERM, then stop cleanly (final snapshot)."""
    server = EmulatorServer(
        host,
        port,
        data_dir,
        {access_key_id: access_key_secret},
        increments_as_deltas,
        region=region,
        sts_token=sts_token,
    )
    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    server.start()
    print(
        f"Tablestore emulator listening on {server.url} (access key id {access_key_id!r}"
        f"{' with an STS token' if sts_token else ''}, region {region or 'any'}, "
        f"data dir {data_dir or 'none: in memory'}, increments as {'deltas' if increments_as_deltas else 'values'})",
        flush=True,
    )
    try:
        while not stop_requested.wait(0.5):
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
