"""finesim: fine-grained and conditional semantic textual similarity.

The public API (imported on first use, so ``import finesim`` stays light and never imports torch)::

    import finesim

    scorer = finesim.ConditionalScorer("runs/minilm-bi-mse-tuned/model")   # or a Hub id, or any finesim folder
    scorer.similarity("A man plays a guitar.", "A woman plays a violin.", "the instrument")
    scorer = finesim.load_scorer("runs/my-ensemble")     # any model finesim scores: a finesim.Scorer
    finesim.similarity_matrix(scorer, ["A man plays a guitar."], ["A woman sings.", "A dog runs."], "the activity")
    finesim.rank(scorer, "A man plays a guitar.", ["A woman sings.", "A dog runs."], "the activity", top_k=1)
    # [{"corpus_id": 0, "score": ...}]: sentence-transformers' rank / semantic_search shape, best first

    recipe = finesim.load_recipe("recipes/csts/minilm-bi-mse-tuned.yaml")   # a recipe of any method, CASE's too
    result = finesim.train(recipe, output_dir="runs/x")
    record = finesim.evaluate("runs/x/model", tasks="csts")      # the results record of `finesim evaluate`

    index = finesim.ConditionalIndex.build("runs/tri/model", corpus_texts, "my-index")   # or .open("my-index")
    index.search("A man plays a guitar.", "the instrument", k=5)  # [{"index", "text", "score"}, ...]

Sub-packages: :mod:`finesim.data` (loaders), :mod:`finesim.models` (resolution, builders, heads, saving),
:mod:`finesim.losses` (one loss per file), :mod:`finesim.training` (recipes and the runner),
:mod:`finesim.evaluation` (tasks, metrics, scorers, harness), :mod:`finesim.case` (CASE),
:mod:`finesim.prompting` (LLM prompting baselines), :mod:`finesim.index` (conditional search), :mod:`finesim.analysis`,
:mod:`finesim.cli`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from finesim._version import __version__

if TYPE_CHECKING:  # the same names for type checkers (py.typed); at run time __getattr__ imports them on first use
    from pathlib import Path

    from finesim.evaluation.api import Scorer, rank, similarity_matrix
    from finesim.evaluation.loading import load_scorer
    from finesim.evaluation.record import evaluate_model as evaluate
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.index.conditional_index import ConditionalIndex
    from finesim.training.recipe import CaseRecipe, Recipe, load_recipe
    from finesim.training.runner import TrainResult

__all__ = [
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
]


def __getattr__(name: str) -> Any:
    """Import the public API on first use (PEP 562)."""
    if name == "ConditionalScorer":
        from finesim.evaluation.scoring import ConditionalScorer

        return ConditionalScorer
    if name == "ConditionalIndex":
        from finesim.index import ConditionalIndex

        return ConditionalIndex
    if name in ("Scorer", "similarity_matrix", "rank"):
        from finesim.evaluation import api

        return getattr(api, name)
    if name == "load_scorer":
        from finesim.evaluation.loading import load_scorer

        return load_scorer
    if name == "load_recipe":
        from finesim.training.recipe import load_recipe

        return load_recipe
    if name == "evaluate":
        from finesim.evaluation.record import evaluate_model

        return evaluate_model
    raise AttributeError(f"module 'finesim' has no attribute {name!r}")


def train(
    recipe: Recipe | CaseRecipe,
    *,
    output_dir: str | Path | None = None,
    data: str | Path | None = None,
    resume: bool = True,
    callbacks: list[Any] | None = None,
    data_root: str | Path | None = None,
) -> TrainResult:
    """Train a recipe of any method, as ``finesim train RECIPE`` does: a sentence-transformers recipe through
    :func:`finesim.training.runner.train`, a CASE recipe (``method: case``) through
    :func:`finesim.case.pipeline.train_recipe`.

    Args:
        recipe: from :func:`load_recipe`.
        output_dir: overrides the recipe's ``output_dir`` (one of them is required).
        data: the data root, which relative data paths are read from (``--data``; the name
            :func:`evaluate` gives it), over the recipe's ``data.root`` and ``$FINESIM_DATA``.
        resume: continue the same run in ``output_dir`` (a CASE run, which keeps no checkpoints, is trained again);
            False deletes an earlier run there first (``--no-resume``).
        callbacks: extra ``transformers.TrainerCallback`` objects (sentence-transformers recipes only).
        data_root: the earlier name of ``data`` (``finesim.training.train``'s), still taken.

    Returns:
        a :class:`~finesim.training.runner.TrainResult`: for CASE, ``model_dir`` is the output folder (the CASE model),
        ``metrics`` what ``training.json`` holds and ``model`` None (load it with :func:`load_scorer`).
    """
    from finesim.training.recipe import CaseRecipe, RecipeError, recipe_source
    from finesim.training.runner import TrainResult
    from finesim.training.runner import train as train_sentence_transformers

    if data is not None and data_root is not None:
        raise TypeError("finesim.train: pass the data root once, as data= (data_root= is its earlier name)")
    data = data if data is not None else data_root
    if not isinstance(recipe, CaseRecipe):
        root = None if data is None else str(data)
        return train_sentence_transformers(
            recipe, output_dir=output_dir, data_root=root, resume=resume, callbacks=callbacks
        )
    from finesim.case.pipeline import train_recipe
    from finesim.training.preflight import output_folder

    if callbacks:
        raise RecipeError(
            f"{recipe_source(recipe)}: callbacks are transformers TrainerCallbacks; a CASE recipe (method: case) "
            "trains its projection without the trainer, so they would never be called"
        )
    payload = train_recipe(recipe, output_dir=output_dir, data=data, resume=resume)
    out = output_folder(recipe, output_dir)
    return TrainResult(output_dir=out, model_dir=out, metrics=payload)


def __dir__() -> list[str]:
    """The module's names and the lazily imported public API (so ``dir(finesim)`` and ``help`` show it)."""
    return sorted({*__all__, *(n for n in globals() if n.startswith("__"))})
