"""Configuration of trimmed-data handling and retention warnings."""

import pytest

from cdcbridge.config import ConfigError, OnTrimmed, parse_config


def _tables(**table: object) -> dict:
    return {"source": {"tables": [{"name": "t", **table}]}}


def test_on_trimmed_defaults_to_resnapshot_and_retention_shares_to_half_and_four_fifths() -> None:
    config = parse_config(_tables(), environ={})
    assert config.source.tables[0].on_trimmed is OnTrimmed.RESNAPSHOT
    assert (config.observability.retention_warning_share, config.observability.retention_error_share) == (0.5, 0.8)


def test_on_trimmed_continue_is_accepted() -> None:
    assert parse_config(_tables(on_trimmed="continue"), environ={}).source.tables[0].on_trimmed is OnTrimmed.CONTINUE


def test_on_trimmed_stop_and_continue_are_accepted_and_workers_run_snapshots_by_default() -> None:
    assert parse_config(_tables(on_trimmed="stop"), environ={}).source.tables[0].on_trimmed is OnTrimmed.STOP
    config = parse_config(_tables(), environ={})
    assert config.snapshot.incremental.run_in_workers is True
    off = parse_config({**_tables(), "snapshot": {"incremental": {"run_in_workers": False}}}, environ={})
    assert off.snapshot.incremental.run_in_workers is False


def test_an_unknown_on_trimmed_value_names_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"source.tables.0.on_trimmed: .*'stop', 'continue' or 'resnapshot'"):
        parse_config(_tables(on_trimmed="skip"), environ={})


@pytest.mark.parametrize(
    ("observability", "message"),
    [
        ({"retention_warning_share": 0.9}, r"retention_warning_share \(0.9\) must be below retention_error_share"),
        ({"retention_warning_share": 0}, r"retention_warning_share: Input should be greater than 0"),
        ({"retention_error_share": 1.2}, r"retention_error_share: Input should be less than 1"),
    ],
)
def test_retention_shares_are_validated(observability: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({**_tables(), "observability": observability}, environ={})
