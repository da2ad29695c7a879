"""The one client of the emulator's admin endpoints (`/_emulator/...`, JSON, same port as the Tablestore protocol).

The demo, the benchmarks, the chaos run and the tests reshape streams and inject faults through it, so the routes,
bodies and error handling live in one place (the server side is `cdcbridge.emulator.server`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class EmulatorAdminError(RuntimeError):
    """An admin call failed: the emulator refused it (`status` and `code` set) or did not answer (both None)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class EmulatorAdmin:
    """`EmulatorAdmin(url)`: health, stats, split / merge / trim of a table's stream, fault rules."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def request(self, method: str, route: str, body: dict[str, Any] | None = None) -> Any:
        """Call `METHOD /_emulator/<route>` with a JSON body; the decoded answer, or EmulatorAdminError."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/_emulator/{route}", data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            raise _refused(method, route, error) from None
        except OSError as error:  # refused connection, timeout, dropped connection
            raise EmulatorAdminError(f"the emulator at {self.url} did not answer {method} {route}: {error}") from error

    def health(self) -> dict[str, Any]:
        """`{"status": "ok", "tables": N}` while the emulator serves."""
        return self.request("GET", "health")

    def stats(self) -> dict[str, dict[str, float]]:
        """Calls and server-side seconds per Tablestore API since the emulator started."""
        return self.request("GET", "stats")

    def split(self, table: str, shard_id: str) -> list[str]:
        """Split an open shard of `table`'s stream; the two child shard ids."""
        return list(self.request("POST", "split", {"table": table, "shard_id": shard_id})["children"])

    def merge(self, table: str, shard_id: str, sibling_shard_id: str) -> str:
        """Merge two adjacent open shards; the child shard id (status 400 if they are not adjacent)."""
        body = {"table": table, "shard_id": shard_id, "sibling_shard_id": sibling_shard_id}
        return str(self.request("POST", "merge", body)["child"])

    def trim(self, table: str, before_ms: int) -> int:
        """Drop the stream records of `table` committed before `before_ms` (epoch ms); how many were dropped."""
        return int(self.request("POST", "trim", {"table": table, "before_ms": before_ms})["dropped"])

    def create_sharded_table(
        self, streams: Any, table: str, primary_key: list[tuple[str, str]], shards: int
    ) -> tuple[str, list[str]]:
        """A table with a stream (24 h retention: only the harness trims) whose root shard is split, breadth first
        and before any write (so the closed parents are empty), until `shards` are open.

        `streams` is a `cdcbridge.tablestore.StreamClient`; returns the stream id and the open shard ids.
        """
        from tablestore import CapacityUnit, ReservedThroughput, TableMeta, TableOptions

        streams.create_table_with_stream(
            TableMeta(table, primary_key), TableOptions(time_to_live=-1, max_version=1),
            ReservedThroughput(CapacityUnit(0, 0)), 24,
        )  # fmt: skip
        stream_id = streams.describe_table_stream(table).stream_id
        open_shards = [shard.shard_id for shard in streams.list_all_shards(stream_id)]
        while len(open_shards) < shards:
            parent = open_shards.pop(0)
            open_shards += self.split(table, parent)
        return stream_id, open_shards

    def set_faults(
        self, rules: list[dict[str, Any]], *, append: bool = False, seed: int | None = None
    ) -> list[dict[str, Any]]:
        """Install fault rules (schema in `cdcbridge.emulator.faults`), replacing the current ones unless `append`;
        the rules now in force."""
        body: dict[str, Any] = {"rules": rules}
        if append:
            body["append"] = True
        if seed is not None:
            body["seed"] = seed
        return list(self.request("POST", "faults", body)["rules"])

    def clear_faults(self) -> None:
        """Remove every fault rule."""
        self.request("DELETE", "faults")

    def faults(self) -> list[dict[str, Any]]:
        """The fault rules in force, with their remaining counts."""
        return list(self.request("GET", "faults")["rules"])


def _refused(method: str, route: str, error: urllib.error.HTTPError) -> EmulatorAdminError:
    """The emulator's JSON error (`{"error", "code"}`) as an EmulatorAdminError; a non-JSON body is quoted."""
    raw = error.read()
    try:
        answer = json.loads(raw)
        message, code = str(answer["error"]), answer.get("code")
    except (ValueError, KeyError, TypeError):
        message, code = raw[:200].decode(errors="replace") or error.reason, None
    return EmulatorAdminError(f"{method} /_emulator/{route} failed ({error.code}): {message}", status=error.code,
                              code=code)  # fmt: skip
