"""A scripted Confluent-compatible schema registry over HTTP or HTTPS that records what clients send.

Enough of the API for the bridge's registration (PUT /config, POST versions) and the apply job's preload (GET
versions); every request is recorded with its Authorization header, so tests see the credentials a client used.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class SeenRequest:
    method: str
    path: str
    authorization: str | None


@dataclass
class FakeRegistry:
    """`status` answers every request with that HTTP status instead (401, 404, 503 ...)."""

    tls: tuple[Path, Path] | None = None  # (certificate chain, key) to serve HTTPS
    status: int | None = None
    seen: list[SeenRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                registry.seen.append(SeenRequest(self.command, self.path, self.headers.get("Authorization")))
                status, body = registry._reply(self.command, self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeRegistry:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _reply(self, method: str, path: str) -> tuple[int, object]:
        path = path.split("?", 1)[0]
        if self.status is not None:
            return self.status, {"error_code": self.status * 100 + 1, "message": f"scripted HTTP {self.status}"}
        if method == "PUT" and path.startswith("/config/"):
            return 200, {"compatibility": "FULL_TRANSITIVE"}
        if method == "POST" and path.endswith("/versions"):
            return 200, {"id": 1}
        if method == "GET" and path.endswith("/versions"):
            return 200, []
        return 404, {"error_code": 40401, "message": "not found"}


def self_signed_ca(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate for 127.0.0.1, server key) as PEM files in `folder`.

    With the key identifiers and key usage Python 3.13's strict X.509 verification requires of a chain."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(name("cdcbridge test CA")).issuer_name(name("cdcbridge test CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths
