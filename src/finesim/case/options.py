"""CASE options: a CASE recipe (``method: case``, options in its ``case:`` section, read and checked by the one recipe
loader, :mod:`finesim.training.recipe`), the command line over it, and the flat option dict the actions take.

Command line > recipe > defaults (:class:`~finesim.training.recipe.CaseSpec`'s). Every value is checked by the
recipe schema; an error names the recipe file and the key (``case.dim``) or the command line and the flag.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from finesim.options import RecipeError, unknown_key
from finesim.training.recipe import CaseRecipe, CaseSpec, load_recipe, parse_dims, recipe_error

__all__ = ["DEFAULTS", "case_recipe", "default_cache_dir", "parse_dims", "recipe_options", "resolve_options"]

DEFAULTS: dict[str, Any] = {**CaseSpec().model_dump(), "seed": CaseRecipe().seed}
COMMAND_LINE = "command line"


def default_cache_dir() -> Path:
    """``$FINESIM_CASE_CACHE``, else ``$FINESIM_CACHE/case``, else ``~/.cache/finesim/case``."""
    from finesim.case.cache import configured_cache_dir

    return configured_cache_dir() or Path.home() / ".cache" / "finesim" / "case"


def case_recipe(command_line: Mapping[str, Any] | None = None, recipe: str | Path | None = None) -> CaseRecipe:
    """The CASE recipe of a command: the recipe file (or the defaults) with the command line's values over it.

    Args:
        command_line: option values given on the command line (or by a caller); None means "not given". Keys are
            option names of :data:`DEFAULTS` (``-`` or ``_``).
        recipe: a recipe file with ``method: case``, or None.

    Raises:
        RecipeError: the file is not a CASE recipe, or an unknown key or invalid value; the message names the recipe
            file and the key, or the command line and the flag.
    """
    base = CaseRecipe() if recipe is None else load_recipe(recipe)
    if not isinstance(base, CaseRecipe):
        raise RecipeError(f"{recipe}: not a CASE recipe (method {base.method!r}); CASE recipes set method: case")
    given: dict[str, Any] = {}
    for raw_key, value in (command_line or {}).items():
        key = str(raw_key).replace("-", "_")
        if key not in DEFAULTS:
            raise unknown_key(key, DEFAULTS, "", COMMAND_LINE)
        if value is not None:
            given[key] = value
    if not given:
        return base
    # only what the recipe and the command line really set: a key set here counts as given (``model_fields_set``)
    data = base.model_dump(exclude_unset=True)
    if "seed" in given:
        data["seed"] = given.pop("seed")
    data["case"] = {**data.get("case", {}), **given}
    try:
        merged = CaseRecipe.model_validate(data)
    except ValidationError as err:
        raise recipe_error(err, CaseRecipe, COMMAND_LINE, key=lambda loc: "--" + loc[-1].replace("_", "-")) from None
    merged._source = base._source
    return merged


def recipe_options(recipe: CaseRecipe) -> dict[str, Any]:
    """The flat option dict of the CASE actions: the ``case`` section, ``seed``, ``cache_dir`` filled in
    (:func:`default_cache_dir`) and ``recipe`` (the file, or None)."""
    options = {**recipe.case.model_dump(), "seed": recipe.seed}
    options["cache_dir"] = options["cache_dir"] or str(default_cache_dir())
    options["recipe"] = None if recipe._source == "recipe" else recipe._source
    return options


def resolve_options(command_line: Mapping[str, Any] | None = None, recipe: str | Path | None = None) -> dict[str, Any]:
    """Command line > recipe > defaults as the flat option dict of the CASE actions (:func:`case_recipe`,
    :func:`recipe_options`)."""
    return recipe_options(case_recipe(command_line, recipe))
