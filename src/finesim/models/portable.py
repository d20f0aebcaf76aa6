"""Model folders that load without finesim: finesim's module classes saved as code inside the folder.

A tri-encoder's :class:`~finesim.models.condition_head.ConditionHead`, CCL's projection head, the STS regression head
and the prompt-templating transformer of a decoder LM are sentence-transformers modules whose classes live in
finesim. ``save_pretrained`` records them in ``modules.json`` by their finesim names
(``finesim.models.condition_head.ConditionHead``), so plain sentence-transformers could load such a folder only with
finesim installed. :func:`make_portable` uses sentence-transformers' custom-module convention instead: it copies the
source of each such module into the folder as a self-contained file (``finesim_condition_head.py``, which imports
only torch and sentence-transformers) and points ``modules.json`` at it (``finesim_condition_head.ConditionHead``).
Then, with sentence-transformers alone::

    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer("path/to/model", trust_remote_code=True)

loads the folder (``trust_remote_code=True`` allows the module file to be imported; sentence-transformers asks for it
for any module class outside its own package). The files are finesim's own module files, copied as they are; an
import of another finesim module (the heads' shared save/load base, :mod:`finesim.models.head_module`) becomes a
relative import of that module's copy, written beside it.

finesim itself never runs the copied code: :func:`module_classes` maps both names, the finesim one of folders saved
before this existed and the portable one, to finesim's classes (:func:`finesim.models.io.load_with_finesim_modules`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from finesim.models.condition_head import ConditionHead
from finesim.models.projection_head import ProjectionHead
from finesim.models.prompt_transformer import PromptTransformer
from finesim.models.regression_head import RegressionHead

MODULE_CLASSES: tuple[type, ...] = (ProjectionHead, ConditionHead, RegressionHead, PromptTransformer)
FILE_PREFIX = "finesim_"  # finesim.models.condition_head -> finesim_condition_head.py in the folder
PACKAGE = "finesim.models."
MODULES_FILE = "modules.json"
# "from finesim.models.<name> import ..." at the start of a line: rewritten to the copy of <name> beside the file
_FINESIM_IMPORT = re.compile(r"^from finesim\.models\.(\w+) import ", re.M)


def portable_module_name(module: str) -> str:
    """The file stem (without ``.py``) of finesim module ``module``'s copy in a model folder."""
    return FILE_PREFIX + module.removeprefix(PACKAGE)


def portable_type(cls: type) -> str:
    """The ``modules.json`` type of ``cls`` in a portable folder (``finesim_condition_head.ConditionHead``)."""
    return f"{portable_module_name(cls.__module__)}.{cls.__qualname__}"


def module_classes() -> dict[str, type]:
    """``modules.json`` type -> finesim class, for both the finesim names (folders saved before :func:`make_portable`
    existed) and the portable ones, so finesim loads every folder it saved without ``trust_remote_code``."""
    out: dict[str, type] = {}
    for cls in MODULE_CLASSES:
        out[f"{cls.__module__}.{cls.__qualname__}"] = cls
        out[portable_type(cls)] = cls
    return out


def portable_source(module: str) -> tuple[str, list[str]]:
    """The source to write for finesim module ``module`` and the finesim modules it imports (to copy beside it).

    Raises:
        ValueError: the module imports finesim in another form than ``from finesim.models.<name> import ...`` at
            the start of a line (it would not be self-contained).
    """
    path = Path(__file__).with_name(module.removeprefix(PACKAGE) + ".py")
    text = path.read_text(encoding="utf-8")
    needed = _FINESIM_IMPORT.findall(text)
    text = _FINESIM_IMPORT.sub(lambda m: f"from .{portable_module_name(m.group(1))} import ", text)
    if re.search(r"^\s*(from|import) finesim\b", text, re.M):
        raise ValueError(f"{path} imports finesim in a form make_portable cannot rewrite; it cannot be copied")
    return text, [PACKAGE + name for name in needed]


def make_portable(folder: str | Path) -> list[str]:
    """Copy the code of the finesim modules a saved sentence-transformers folder lists into it and point
    ``modules.json`` at the copies (see the module docstring); returns the files written. A folder without finesim
    modules (a bi-encoder, a cross-encoder) is left as it is. Safe to run again, and on folders saved before."""
    folder = Path(folder)
    path = folder / MODULES_FILE
    if not path.is_file():
        return []
    modules = json.loads(path.read_text(encoding="utf-8"))
    classes = module_classes()
    todo: list[str] = []
    changed = False
    for entry in modules:
        cls = classes.get(str(entry.get("type", "")))
        if cls is None:
            continue
        if entry["type"] != portable_type(cls):
            entry["type"] = portable_type(cls)
            changed = True
        todo.append(cls.__module__)
    written: list[str] = []
    done: set[str] = set()
    while todo:
        module = todo.pop()
        if module in done:
            continue
        done.add(module)
        text, needed = portable_source(module)
        name = portable_module_name(module) + ".py"
        _write_text(folder / name, text)
        written.append(name)
        todo.extend(needed)
    if changed:
        _write_text(path, json.dumps(modules, indent=2))
    return sorted(written)


def foreign_module_types(folder: str | Path) -> list[str]:
    """The ``modules.json`` types of a folder that plain sentence-transformers cannot resolve by itself: neither its
    own classes nor a module file in the folder (e.g. a finesim class of a folder saved before :func:`make_portable`
    existed)."""
    out = []
    for entry in read_modules(folder) or []:
        ref = str(entry.get("type", ""))
        if ref.startswith("sentence_transformers."):
            continue
        stem = ref.rpartition(".")[0]
        if "." in stem or not (Path(folder) / f"{stem}.py").is_file():
            out.append(ref)
    return out


def needs_remote_code(folder: str | Path) -> bool:
    """Whether plain sentence-transformers needs ``trust_remote_code=True`` for the folder (it lists a module class
    outside sentence-transformers)."""
    return any(not str(m.get("type", "")).startswith("sentence_transformers.") for m in read_modules(folder) or [])


def read_modules(folder: str | Path) -> list[dict[str, Any]] | None:
    """The folder's parsed ``modules.json``; None when it is missing or not JSON."""
    try:
        modules: list[dict[str, Any]] = json.loads((Path(folder) / MODULES_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return modules


def _write_text(path: Path, text: str) -> None:
    from finesim.results import atomic_write

    atomic_write(path, lambda fh: fh.write(text), mode="w")
