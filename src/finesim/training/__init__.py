"""Training: recipes, the tables of encoders, data formats and objectives, and the runner built on
sentence-transformers' trainers.

Python use::

    from finesim.training import load_recipe, train
    result = train(load_recipe("recipes/csts/minilm-bi-mse.yaml"), output_dir="runs/bi-mse")

Where things are declared: :mod:`finesim.training.encoders` (``ENCODERS``), :mod:`finesim.training.formats`
(``DATA_FORMATS``), :mod:`finesim.training.objectives` (``OBJECTIVES``); see docs/DEVELOPING.md.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

# the public names by the module that defines them; imported on first use (PEP 562), so reading a recipe (the
# checks ``finesim train`` makes of a recipe file) does not import torch
_ENCODERS = ("ENCODERS", "EncoderType", "get_encoder")
_FORMATS = ("DATA_FORMATS", "get_data_format")
_OBJECTIVES = ("OBJECTIVES", "Objective", "get_objective", "register_objective")
_RECIPE = ("Recipe", "RecipeError", "check_recipe", "load_recipe", "recipe_from_dict")
_RUNNER = ("TrainResult", "train")

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
    from finesim.training.encoders import ENCODERS
    from finesim.training.formats import DATA_FORMATS
    from finesim.training.objectives import OBJECTIVES

    return {"encoders": sorted(ENCODERS), "objectives": sorted(OBJECTIVES), "data_formats": sorted(DATA_FORMATS)}


def __getattr__(name: str) -> Any:
    """Import the public names on first use (PEP 562)."""
    module: ModuleType
    if name in _ENCODERS:
        from finesim.training import encoders as module
    elif name in _FORMATS:
        from finesim.training import formats as module
    elif name in _OBJECTIVES:
        from finesim.training import objectives as module
    elif name in _RECIPE:
        from finesim.training import recipe as module
    elif name in _RUNNER:
        from finesim.training import runner as module
    else:
        raise AttributeError(f"module 'finesim.training' has no attribute {name!r}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*__all__, *(n for n in globals() if n.startswith("__"))})
