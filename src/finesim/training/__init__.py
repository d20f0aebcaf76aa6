"""Training: recipes, the plug-in registries and the runner built on sentence-transformers' trainers.

Python use::

    from finesim.training import load_recipe, train
    result = train(load_recipe("recipes/csts/minilm-bi-mse.yaml"), output_dir="runs/bi-mse")

Plug-in API: :mod:`finesim.training.registry` (``register_objective``, ``register_encoder``,
``register_data_format``); see docs/csts-training.md.
"""

from __future__ import annotations

from finesim.training.recipe import Recipe, RecipeError, load_recipe, recipe_from_dict
from finesim.training.registry import (
    EncoderType,
    Objective,
    available,
    get_encoder,
    get_objective,
    register_data_format,
    register_encoder,
    register_objective,
)
from finesim.training.runner import TrainResult, train

__all__ = [
    "EncoderType",
    "Objective",
    "Recipe",
    "RecipeError",
    "TrainResult",
    "available",
    "get_encoder",
    "get_objective",
    "load_recipe",
    "recipe_from_dict",
    "register_data_format",
    "register_encoder",
    "register_objective",
    "train",
]
