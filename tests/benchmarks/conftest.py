"""Fixtures for the benchmark scripts' tests: each script loaded as a module from its file (they are not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report() -> ModuleType:
    """benchmarks/claims/report.py"""
    return _load("claims_report", REPO / "benchmarks" / "claims" / "report.py")


@pytest.fixture(scope="module")
def run() -> ModuleType:
    """benchmarks/claims/run.py"""
    return _load("claims_run", REPO / "benchmarks" / "claims" / "run.py")
