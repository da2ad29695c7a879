"""README.md stays true: its configuration reference is the one generated from the models."""

from pathlib import Path

from cdcbridge.config import reference_markdown

README = Path(__file__).resolve().parents[2] / "README.md"
START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def test_readme_configuration_reference_matches_the_models() -> None:
    text = README.read_text()
    section = text[text.index(START) + len(START) : text.index(END)].strip()
    assert section == reference_markdown(), "run: .venv/bin/python -m cdcbridge.config"


def test_readme_shows_the_two_commands() -> None:
    text = README.read_text()
    assert "make demo" in text and "make test" in text
