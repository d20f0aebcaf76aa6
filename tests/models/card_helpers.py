"""Shared by the model-card and export tests (imported, not a conftest: the test folders have no packages): run a
card's code with its ``path/to/<folder name>`` placeholder pointing at the folder."""

from __future__ import annotations

from pathlib import Path

from conftest import run_card_code
from finesim.models.card import placeholder_path


def run_card(folder: Path, scratch: Path) -> str:
    """Run the ```python blocks of ``folder/README.md`` in a fresh interpreter, the placeholder path replaced by
    ``folder``'s absolute path (a copy of the card in ``scratch`` is run); returns stdout."""
    text = (folder / "README.md").read_text(encoding="utf-8")
    placeholder = placeholder_path(folder)
    assert repr(placeholder) in text, f"{folder / 'README.md'} does not load the model from {placeholder!r}"
    scratch.mkdir(parents=True, exist_ok=True)
    copy = scratch / "README.md"
    copy.write_text(text.replace(repr(placeholder), repr(str(folder.resolve()))), encoding="utf-8")
    return run_card_code(copy)


def scores_printed(out: str) -> list[tuple[str, float]]:
    """The ``condition: score`` lines a card's code prints, in order."""
    found = []
    for line in out.splitlines():
        if line.startswith("the ") and ": " in line:
            condition, score = line.rsplit(": ", 1)
            found.append((condition, float(score)))
    return found
