"""The repository passes ruff's lint and format checks (config in pyproject), Python snippets in docs included."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("ruff")
    if exe is None:
        pytest.fail("ruff is not installed: it is part of the dev extra (pip install -e '.[dev]')")
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_check_is_clean() -> None:
    proc = _ruff("check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_is_clean() -> None:
    proc = _ruff("format", "--no-cache", "--check", ".")
    assert proc.returncode == 0, "run `ruff format .`:\n" + proc.stdout + proc.stderr
