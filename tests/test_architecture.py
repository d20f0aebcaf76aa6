"""Architecture rules checked on the source: no import cycle among finesim's modules (lazy imports count), no module
loaded by a name string, and losses never import training."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import SHARED_DATA, skip_unless_required

SRC = Path(__file__).resolve().parents[1] / "src" / "finesim"
TOOL = SHARED_DATA.parent / "tools" / "import_cycles.py"


def _python_files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_import_cycles() -> None:
    if not TOOL.is_file():
        skip_unless_required(f"the import-cycle tool is not at {TOOL}")
    out = subprocess.run([sys.executable, str(TOOL), str(SRC)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_no_module_is_loaded_by_a_name_string() -> None:
    offenders = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name in ("importlib.import_module", "import_module", "__import__"):
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno} {name}")
    assert not offenders, offenders


def test_losses_import_nothing_from_training() -> None:
    offenders = []
    for path in (SRC / "losses").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("finesim.training"):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders
