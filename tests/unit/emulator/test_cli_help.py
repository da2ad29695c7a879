"""`cdcbridge emulator --help` and the README say what the emulator's options mean for a user's clients."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from cdcbridge.cli import cli

README = Path(__file__).resolve().parents[3] / "README.md"


def _help() -> str:
    result = CliRunner().invoke(cli, ["emulator", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_increments_as_deltas_says_what_it_emulates_and_who_cannot_read_it() -> None:
    text = _help()
    option = text[text.index("--increments-as-deltas") :]
    for phrase in ("INCREMENT cells", "deltas", "MUTATE_LOG", "Java SDK", "PUT of the result"):
        assert phrase in option, phrase


def test_region_and_sts_options_are_offered() -> None:
    text = _help()
    assert "--region" in text and "--sts-token" in text and "EMULATOR_REGION" in text


def test_readme_emulator_section_covers_the_issue_30_points() -> None:
    section = README.read_text().split("## Tablestore emulator", 1)[1].split("\n## ", 1)[0]
    section = " ".join(section.split())
    for phrase in (
        "--increments-as-deltas",
        "Unknown cell type:4",
        "PUT of the result",
        "--region",
        "--sts-token",
        "RT_AFTER_MODIFY",
        "OTSUnsupportOperation",
        "ConnectionClosedException",
        "the stream is the truth",
        "does not retry",
        "Not emulated",
        "Documented choices",
    ):
        assert phrase in section, phrase
    assert re.search(r"OTSFlowControl.*429", section)
