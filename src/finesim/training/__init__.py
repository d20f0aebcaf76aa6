"""Training: recipes, the tables of encoders, data formats and objectives, and the runner built on
sentence-transformers' trainers.

Python use::

    from finesim.training import load_recipe, train
    result = train(load_recipe("recipes/csts/minilm-bi-mse.yaml"), output_dir="runs/bi-mse")

Where things are declared: :mod:`finesim.training.encoders` (``ENCODERS``), :mod:`finesim.training.formats`
(``DATA_FORMATS``), :mod:`finesim.training.objectives` (``OBJECTIVES``); see docs/DEVELOPING.md.
"""

from __future__ import annotations

from finesim.training.encoders import ENCODERS, EncoderType, get_encoder
from finesim.training.formats import DATA_FORMATS, get_data_format
from finesim.training.objectives import OBJECTIVES, Objective, get_objective, register_objective
from finesim.training.recipe import Recipe, RecipeError, check_recipe, load_recipe, recipe_from_dict
from finesim.training.runner import TrainResult, train

__all__ = [
    "DATA_FORMATS",
    "ENCODERS",
    "OBJECTIVES",
    "EncoderType",
    "Objective",
    "Recipe",
    "RecipeError",
    "TrainResult",
    "available",
    "check_recipe",
    "get_data_format",
    "get_encoder",
    "get_objective",
    "load_recipe",
    "recipe_from_dict",
    "register_objective",
    "train",
]


def available() -> dict[str, list[str]]:
    """Names of every encoder type, objective and data format."""
    return {"encoders": sorted(ENCODERS), "objectives": sorted(OBJECTIVES), "data_formats": sorted(DATA_FORMATS)}
