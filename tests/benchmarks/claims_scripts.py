"""Load a claims-study script (benchmarks/claims/*.py, not a package) as a module for its tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

CLAIMS = Path(__file__).resolve().parents[2] / "benchmarks" / "claims"


def load_script(filename: str) -> ModuleType:
    """``benchmarks/claims/<filename>`` imported under the name ``claims_<stem>``."""
    spec = importlib.util.spec_from_file_location(f"claims_{Path(filename).stem}", CLAIMS / filename)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
