"""The snapshot and end-time settings: an end time needs a timezone, `--end-time` overrides the file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cdcbridge.config import ConfigError, parse_config, parse_end_time, reference_markdown

BASE = {"source": {"tables": [{"name": "orders"}]}}


def test_defaults_run_forever_and_export_in_parallel() -> None:
    config = parse_config(BASE, environ={})
    assert config.bridge.end_time is None
    assert (config.snapshot.parallelism, config.snapshot.page_rows, config.snapshot.clock_skew_margin_seconds) == (
        4, 1000, 5.0,
    )  # fmt: skip


def test_an_end_time_without_a_timezone_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"bridge\.end_time: .*has no timezone; write it as ISO 8601 with one"):
        parse_config({**BASE, "bridge": {"end_time": "2025-06-01T12:00:00"}}, environ={})
    with pytest.raises(ConfigError, match="--end-time '2025-06-01 12:00'"):
        parse_end_time("2025-06-01 12:00")


def test_the_command_line_end_time_replaces_the_configured_one() -> None:
    config = parse_config({**BASE, "bridge": {"end_time": "2025-06-01T12:00:00Z"}}, environ={})
    assert config.bridge.end_time == datetime(2025, 6, 1, 12, tzinfo=UTC)
    later = config.with_end_time(parse_end_time("2025-06-01T20:30:00+08:00"))
    assert later.bridge.end_time == datetime(2025, 6, 1, 20, 30, tzinfo=timezone(timedelta(hours=8)))
    assert config.bridge.end_time == datetime(2025, 6, 1, 12, tzinfo=UTC)  # the original is unchanged


def test_an_environment_override_sets_the_end_time() -> None:
    config = parse_config(BASE, environ={"CDCBRIDGE__BRIDGE__END_TIME": "2025-06-01T12:00:00Z"})
    assert config.bridge.end_time == datetime(2025, 6, 1, 12, tzinfo=UTC)


def test_the_reference_lists_the_new_sections() -> None:
    reference = reference_markdown()
    for key in ("bridge.end_time", "bridge.end_time_grace_seconds", "snapshot.parallelism",
                "snapshot.clock_skew_margin_seconds", "snapshot.split_size_bytes"):  # fmt: skip
        assert f"| `{key}` |" in reference
