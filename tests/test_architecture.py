"""Architecture rules checked on the source: no import cycle among finesim's modules (lazy imports count), no module
loaded by a name string, losses never import training, and imports follow docs/DEVELOPING.md's layering."""

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


# docs/DEVELOPING.md's layering, lowest first: a module imports (at module level or inside a function) only from its
# own layer or those below. The package's __init__ (the lazily imported public API) and the CLI sit on top.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(names.split())
    for names in (
        "_version paths results options",
        "data",
        "analysis models",
        "losses",
        "evaluation",
        "training",
        "case prompting",
        "index",
        "serving",
        "cli __init__",
    )
)
# the upward edges DEVELOPING.md documents: loading and recognising a CASE folder by its marker
UPWARD = {("evaluation/scoring.py", "finesim.case.model"), ("evaluation/scoring.py", "finesim.case.cache")}


def _layer(module: str) -> int:
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else "__init__"
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def test_imports_follow_the_layering() -> None:
    offenders, upward = [], set()
    for path in _python_files():
        rel = path.relative_to(SRC)
        own = _layer(".".join(("finesim", *rel.with_suffix("").parts)))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:  # a relative import would slip past the check
                offenders.append(f"{rel.as_posix()}:{node.lineno} imports relatively (write finesim.<module>)")
                continue
            # "from finesim import X" (and "import finesim") go through the package's __init__, the top layer
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "finesim":
                targets = [node.module or ""]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "finesim"]
            else:
                continue
            for target in targets:
                edge = (rel.as_posix(), target)
                if _layer(target) <= own:
                    continue
                if edge in UPWARD:
                    upward.add(edge)
                else:
                    offenders.append(f"{edge[0]}:{node.lineno} imports {target}")
    assert not offenders, offenders
    assert upward == UPWARD, f"documented upward edges no longer present: {UPWARD - upward}"
