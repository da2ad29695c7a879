"""Configuration errors name the field and the fix, and never echo a secret: not the value of a misspelt or mistyped
secret key, not a resolved ${ENV} reference, and (once passed through the redaction every CLI error gets) not a
literal secret on the line a YAML syntax error points at."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cdcbridge.config import ConfigError, load_config, parse_config
from cdcbridge.observability.redaction import SecretRedactor

SECRET = "s3cret-Value-91"
ENV = {"SASL_PW": SECRET}


def _config(**kafka_security: object) -> dict[str, object]:
    return {"source": {"tables": [{"name": "t"}]}, "kafka": {"security": kafka_security}}


@pytest.mark.parametrize(
    ("data", "names", "fix"),
    [
        (_config(sasl_pasword="${SASL_PW}"), "kafka.security.sasl_pasword: unknown key", "mean 'sasl_password'?"),
        (_config(tls_enabled="${SASL_PW}"), "kafka.security.tls_enabled: unknown key", "check the spelling"),
        (_config(sasl_password={"value": "${SASL_PW}"}), "kafka.security.sasl_password: Input should be a", "string"),
        (_config(protocol="SASL_SSI", sasl_password="${SASL_PW}"), "kafka.security.protocol: Input", "'SASL_SSL'"),
        (_config(sasl_password="${NOT_EXPORTED}"), "kafka.security.sasl_password: environment variable", "export it"),
        ({"source": {"tables": [{"name": "t", "partitions": "${SASL_PW}"}]}}, "source.tables.0.partitions", "integer"),
    ],
)
def test_config_errors_name_the_field_and_the_fix_without_the_secret(
    data: dict[str, object], names: str, fix: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, origin="bridge.yaml", environ=ENV)
    message = str(raised.value)
    assert message.startswith("invalid configuration in bridge.yaml: ") or "environment variable" in message
    assert names in message and fix in message
    assert SECRET not in message


def test_a_yaml_error_on_a_line_holding_a_literal_secret_names_the_place_but_never_quotes_it(tmp_path: Path) -> None:
    """PyYAML's own message quotes the offending line; the config error says where and what, never the text."""
    path = tmp_path / "bridge.yaml"
    text = yaml.safe_dump(_config(protocol="SASL_SSL", sasl_password="PLACEHOLDER"))
    path.write_text(text.replace("PLACEHOLDER", f"'{SECRET}"))  # an unclosed quote on the secret's line
    where_and_fix = r"is not valid YAML at line \d+, column \d+: .*fix the syntax there"
    with pytest.raises(ConfigError, match=where_and_fix) as raised:
        load_config(path, environ={})
    assert SECRET not in str(raised.value)
    assert SECRET not in SecretRedactor().redact(str(raised.value))
