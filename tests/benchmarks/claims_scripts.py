"""Load a benchmark script (benchmarks/*.py, benchmarks/claims/*.py: not a package) as a module for its tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
CLAIMS = BENCHMARKS / "claims"


def load_script(filename: str) -> ModuleType:
    """``benchmarks/claims/<filename>`` imported under the name ``claims_<stem>``."""
    return load_benchmark(f"claims/{filename}", name=f"claims_{Path(filename).stem}")


def load_benchmark(path: str, *, name: str | None = None) -> ModuleType:
    """``benchmarks/<path>`` imported under ``name`` (default: ``benchmark_<stem>``)."""
    spec = importlib.util.spec_from_file_location(name or f"benchmark_{Path(path).stem}", BENCHMARKS / path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
