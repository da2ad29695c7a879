"""An HTTP proxy in front of the schema registry that records the Authorization header of every request, so a test
sees which credentials a `cdcbridge` process really sent (Apicurio itself accepts any)."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization"}


class RecordingRegistryProxy:
    """Forwards to `upstream_url` (scheme://host:port/path-prefix); `url` is the same API through the proxy."""

    def __init__(self, upstream_url: str) -> None:
        upstream = urlsplit(upstream_url)
        self._upstream_host = upstream.hostname or "127.0.0.1"
        self._upstream_port = upstream.port or 80
        self._prefix = upstream.path.rstrip("/")
        self.authorizations: list[str | None] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.authorizations.append(self.headers.get("Authorization"))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP | {"host"}}
                connection = http.client.HTTPConnection(proxy._upstream_host, proxy._upstream_port, timeout=30)
                try:
                    connection.request(self.command, self.path, body=body or None, headers=headers)
                    answer = connection.getresponse()
                    data = answer.read()
                    self.send_response(answer.status)
                    for name, value in answer.getheaders():
                        if name.lower() not in _HOP_BY_HOP | {"content-length"}:
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    connection.close()

            do_GET = do_POST = do_PUT = do_DELETE = _forward

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{self._prefix}"

    def start(self) -> RecordingRegistryProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
