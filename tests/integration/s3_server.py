"""An S3-compatible server on loopback for the object-storage tests: moto's server mode (``moto[server]`` of the dev
extras), one process per test session, with a bucket and fresh credentials. moto does not check request signatures,
so the bucket and its listings are plain unsigned HTTP."""

from __future__ import annotations

import secrets
import sys
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from cdcbridge.harness.processes import ChildProcess, free_port

LOOPBACK = "127.0.0.1"


def _http(method: str, url: str) -> bytes:
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str
    access_key: str
    #: Unique per session, so that a search of a log for it cannot be fooled by a common word.
    secret_key: str
    scratch: Path

    def url(self, key: str) -> str:
        return f"s3a://{self.bucket}/{key}"

    def keys(self, prefix: str) -> list[str]:
        """The object keys under `prefix` (ListObjectsV2, every page)."""
        keys: list[str] = []
        token = ""
        while True:
            query = f"list-type=2&prefix={quote(prefix)}" + (f"&continuation-token={quote(token)}" if token else "")
            root = ET.fromstring(_http("GET", f"{self.endpoint}/{self.bucket}?{query}"))
            ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
            keys += [element.text or "" for element in root.iter(f"{ns}Key")]
            following = root.find(f"{ns}NextContinuationToken")
            if following is None or not following.text:
                return keys
            token = following.text

    def endpoint_conf(self) -> dict[str, str]:
        """The S3A settings that point Spark at this server (no credentials): path-style plain HTTP, and few, short
        retries so that a test fails fast rather than in S3A's default retry ladder."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.attempts.maximum": "3",
            "spark.hadoop.fs.s3a.retry.limit": "3",
            "spark.hadoop.fs.s3a.connection.establish.timeout": "15s",  # Hadoop 3.4.1's floor
            "spark.hadoop.fs.s3a.buffer.dir": str(self.scratch / "s3a-buffer"),
        }


def moto_server_command() -> Path:
    """moto's server script of the test's virtualenv."""
    command = Path(sys.executable).parent / "moto_server"
    if not command.exists():
        raise RuntimeError(
            f"{command} is missing: the object-storage tests need moto's server from the dev extras "
            "(pip install -e '.[dev]', or `make venv`)"
        )
    return command


def start_s3_server(work: Path, bucket: str = "cdcbridge-test") -> tuple[S3Server, ChildProcess]:
    """Start moto_server on a free loopback port, wait until it answers and create `bucket`."""
    port = free_port(LOOPBACK)
    endpoint = f"http://{LOOPBACK}:{port}"
    process = ChildProcess(
        "moto_server", [str(moto_server_command()), "-H", LOOPBACK, "-p", str(port)], work / "moto.log"
    ).start()
    deadline = time.monotonic() + 60
    while True:
        try:
            _http("GET", f"{endpoint}/moto-api/")  # the dashboard answers once the server is up
            break
        except (urllib.error.URLError, ConnectionError) as error:
            if not process.alive or time.monotonic() > deadline:
                process.ensure_dead()
                raise RuntimeError(f"moto_server did not start on {endpoint}: {error}; log tail:\n"
                                   f"{process.log_tail()}") from None  # fmt: skip
            time.sleep(0.2)
    _http("PUT", f"{endpoint}/{bucket}")  # CreateBucket (us-east-1 takes no location constraint)
    server = S3Server(
        endpoint=endpoint,
        bucket=bucket,
        access_key="AKIA" + secrets.token_hex(8).upper(),
        secret_key="cdcbS3cret" + secrets.token_hex(16),
        scratch=work,
    )
    return server, process
