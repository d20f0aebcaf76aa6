"""constraints.txt (the tested versions scripts/setup.sh installs under, made by scripts/compile-constraints.sh) agrees
with pyproject.toml's ranges."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for number, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt line {number}: {line!r} is not 'name==version'"
        key = canonicalize_name(name)
        assert key not in pins, f"constraints.txt line {number}: {name} is pinned twice"
        pins[key] = Version(version)
    return pins


def _requirements() -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    return {group: [Requirement(text) for text in texts] for group, texts in groups.items()}


def test_every_pin_satisfies_the_ranges_in_pyproject() -> None:
    pins = _pins()
    clashes = [
        f"{group}: {req} but constraints.txt pins {pins[canonicalize_name(req.name)]}"
        for group, reqs in _requirements().items()
        for req in reqs
        if canonicalize_name(req.name) in pins
        and not req.specifier.contains(pins[canonicalize_name(req.name)], prereleases=True)
    ]
    assert not clashes, clashes


def test_what_setup_installs_is_all_pinned() -> None:
    """scripts/setup.sh installs the core dependencies and the dev extra: each must have a tested version."""
    pins = _pins()
    groups = _requirements()
    unpinned = [str(req) for req in groups["dependencies"] + groups["dev"] if canonicalize_name(req.name) not in pins]
    assert not unpinned, f"add to constraints.txt: {unpinned}"


def test_the_pins_keep_transformers_and_peft_compatible() -> None:
    """transformers 5.24 refuses peft < 0.22 in add_adapter (finesim's LoRA path); the pins must not pair them."""
    pins = _pins()
    assert not (pins["transformers"] >= Version("5.24") and pins["peft"] < Version("0.22"))


def test_the_file_says_how_it_was_generated() -> None:
    """constraints.txt is a resolver's output (scripts/compile-constraints.sh), not a freeze of some environment."""
    header = [line for line in (ROOT / "constraints.txt").read_text().splitlines() if line.startswith("# ")][:8]
    assert any("bash scripts/compile-constraints.sh" in line for line in header), header
    assert any(line.startswith("#   uv pip compile pyproject.toml --extra dev") for line in header), header
