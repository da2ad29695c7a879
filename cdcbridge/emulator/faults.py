"""Fault injection for `POST /_emulator/faults`: latency, errors, throttling and lost responses, per API.

JSON body::

    {"rules": [
        {"api": "GetStreamRecord",          # an API name or "*" (default) for every Tablestore API
         "latency_ms": 200,                  # sleep before handling (default 0)
         "error_code": "OTSServerBusy",      # answer with this Tablestore error instead of handling the call,
                                             # with the code's real HTTP status (errors.HTTP_STATUS_BY_CODE):
                                             # OTSFlowControl 429; OTSServerBusy, OTSPartitionUnavailable,
                                             # OTSTimeout, OTSServerUnavailable 503; OTSRowOperationConflict 409;
                                             # OTSTableNotReady 404; OTSQuotaExhausted, OTSCapacityUnitExhausted,
                                             # OTSNotEnoughCapacityUnit ... 403; unknown codes 500
         "error_message": "injected",        # optional; default: the service's message for error_code
         "drop_response": false,             # apply the call, then close the connection without answering
                                             # (the client cannot tell whether a write happened)
         "probability": 1.0,                 # chance a matching request triggers the rule, 0 < p <= 1
         "count": 3}                         # fire this many times, then the rule is removed (default: forever)
     ],
     "append": false,                        # add to the current rules instead of replacing them
     "seed": 42}                             # optional seed for the probability draws (reproducible runs)

Rules are tried in order; the first one that matches the API and wins its draw fires. `error_code` and
`drop_response` exclude each other. `{"rules": []}` or `DELETE /_emulator/faults` removes all rules;
`GET /_emulator/faults` lists them with their remaining counts.
"""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass
from typing import Any

from cdcbridge.emulator.errors import HTTP_STATUS_BY_CODE

_RULE_KEYS = {"api", "latency_ms", "error_code", "error_message", "drop_response", "probability", "count"}
_BODY_KEYS = {"rules", "append", "seed"}


class FaultConfigError(ValueError):
    """The faults JSON is malformed; the message names the field."""


@dataclass(slots=True)
class FaultRule:
    api: str = "*"
    latency_ms: int = 0
    error_code: str | None = None
    error_message: str | None = None
    drop_response: bool = False
    probability: float = 1.0
    count: int | None = None

    @property
    def http_status(self) -> int:
        return HTTP_STATUS_BY_CODE.get(self.error_code or "", 500)


def parse_rule(raw: Any, index: int, known_apis: frozenset[str]) -> FaultRule:
    where = f"rules[{index}]"
    if not isinstance(raw, dict):
        raise FaultConfigError(f"{where} must be an object.")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise FaultConfigError(f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(_RULE_KEYS)}.")
    rule = FaultRule(**raw)
    if rule.api != "*" and rule.api not in known_apis:
        raise FaultConfigError(f"{where}.api {rule.api!r} is not a Tablestore API of the emulator (or '*').")
    if not isinstance(rule.latency_ms, int) or rule.latency_ms < 0:
        raise FaultConfigError(f"{where}.latency_ms must be a non-negative integer.")
    if rule.error_code is not None and (not isinstance(rule.error_code, str) or not rule.error_code.startswith("OTS")):
        raise FaultConfigError(f"{where}.error_code must be a Tablestore error code such as 'OTSServerBusy'.")
    if rule.error_code is not None and rule.drop_response:
        raise FaultConfigError(f"{where}: error_code and drop_response exclude each other.")
    if not isinstance(rule.probability, int | float) or not 0 < rule.probability <= 1:
        raise FaultConfigError(f"{where}.probability must be in (0, 1].")
    if rule.count is not None and (not isinstance(rule.count, int) or rule.count < 1):
        raise FaultConfigError(f"{where}.count must be a positive integer.")
    if not (rule.latency_ms or rule.error_code or rule.drop_response):
        raise FaultConfigError(f"{where} does nothing: set latency_ms, error_code or drop_response.")
    return rule


class FaultInjector:
    """The current rules; thread-safe because requests are handled on many threads."""

    def __init__(self, known_apis: frozenset[str]) -> None:
        self._known_apis = known_apis
        self._rules: list[FaultRule] = []
        self._random = random.Random()
        self._lock = threading.Lock()

    def configure(self, body: Any) -> list[dict[str, Any]]:
        if not isinstance(body, dict):
            raise FaultConfigError("The faults body must be a JSON object with a 'rules' list.")
        unknown = set(body) - _BODY_KEYS
        if unknown:
            raise FaultConfigError(f"Unknown keys {sorted(unknown)}; allowed: {sorted(_BODY_KEYS)}.")
        raw_rules = body.get("rules", [])
        if not isinstance(raw_rules, list):
            raise FaultConfigError("'rules' must be a list.")
        rules = [parse_rule(raw, index, self._known_apis) for index, raw in enumerate(raw_rules)]
        with self._lock:
            if "seed" in body:
                self._random.seed(body["seed"])
            self._rules = [*self._rules, *rules] if body.get("append") else rules
        return self.describe()

    def clear(self) -> None:
        with self._lock:
            self._rules = []

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(rule) for rule in self._rules]

    def pick(self, api_name: str) -> FaultRule | None:
        """The rule that fires for this request, if any (consuming one of its `count`)."""
        if not self._rules:
            return None
        with self._lock:
            for rule in self._rules:
                if rule.api not in ("*", api_name):
                    continue
                if rule.probability < 1 and self._random.random() >= rule.probability:
                    continue
                if rule.count is not None:
                    rule.count -= 1
                    if rule.count == 0:
                        self._rules.remove(rule)
                return rule
        return None
