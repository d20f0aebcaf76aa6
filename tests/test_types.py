"""src/finesim passes mypy (config: ``[tool.mypy]`` in pyproject.toml), so CI fails on a type error.

Marked slow: a cold run takes about a minute on two cores. mypy's incremental cache sits in the temporary folder,
one per checkout, so a second run on the same machine takes seconds.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_finds_no_type_errors() -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed: it is part of the dev extra (pip install -e '.[dev]')")
    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    cache = Path(tempfile.gettempdir()) / f"finesim-mypy-cache-{checkout}"
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, "mypy (config in pyproject.toml) found problems:\n" + proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout, proc.stdout + proc.stderr
