"""CASE options: the defaults, recipe files, command line > recipe > defaults, and checks of the values.

A CASE recipe is a YAML file whose keys are option names (``dim``, ``kind``, ``formulation``, ...; ``-`` and ``_``
are the same), plus the free-text keys ``description``, ``paper`` and ``notes``. It is read by the shared recipe
machinery (:mod:`finesim.options`): a key given twice, an empty file or an unknown key (with a
did-you-mean hint) is an error naming the file, and so is a value out of range.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from finesim.options import META_KEYS, RecipeError, did_you_mean, read_recipe_file, unknown_key

DEFAULTS: dict[str, Any] = {
    "model": "sentence-transformers/all-MiniLM-L6-v2",
    "pooling": None,
    "max_length": None,
    "family": None,
    "prompts_file": None,
    "formulation": "conc_sc",  # the paper's best MLM setting (Table 1) and the one chosen on dev with MiniLM
    "subtract_condition": True,
    "normalize_before_subtract": False,
    "cache_dir": None,
    "batch_size": 64,
    "threads": 1,
    "device": None,
    "kind": "nonlinear",
    "dim": 512,
    "lr": 1e-3,
    "train_batch_size": 512,
    "epochs": 30,
    "dropout": None,
    "negative_slope": 0.01,
    "label_divisor": 5.0,
    "label_offset": 0.0,
    "seed": 42,
    "dev": None,
    "dev_fraction": 0.1,
    "eval": [],
    "dims": "64,128,256,512,full",
    "num_directions": 1000,
}

CHOICES = {"kind": ("linear", "nonlinear"), "formulation": ("cond", "sent", "conc_sc", "conc_cs")}
POSITIVE_INTEGERS = ("dim", "epochs", "train_batch_size", "batch_size", "threads", "num_directions")
NUMBERS = ("lr", "dev_fraction", "dropout", "negative_slope", "label_divisor", "label_offset")
BOOLEANS = ("subtract_condition", "normalize_before_subtract")
COMMAND_LINE = "command line"


def default_cache_dir() -> Path:
    """``$FINESIM_CASE_CACHE``, else ``$FINESIM_CACHE/case``, else ``~/.cache/finesim/case``."""
    from finesim.case.cache import configured_cache_dir

    return configured_cache_dir() or Path.home() / ".cache" / "finesim" / "case"


def parse_dims(spec: str | int | list[Any], width: int) -> list[int]:
    """Output dimensions of a sweep, ascending and distinct; the keyword ``full`` stands for ``width``.

    ``spec`` is a comma-separated string (``"64,128,full"``), a single number, or a list of those tokens.
    """
    tokens = spec if isinstance(spec, list) else str(spec).split(",")
    dims = set()
    for token in (str(t).strip() for t in tokens):
        if not token:
            continue
        if token.lower() == "full":
            dims.add(int(width))
        elif token.isdigit() and int(token) > 0:
            dims.add(int(token))
        else:
            raise ValueError(f"--dims: {token!r} is neither a positive integer nor 'full'")
    if not dims:
        raise ValueError("--dims needs at least one dimension")
    return sorted(dims)


def read_case_recipe(path: str | Path) -> dict[str, Any]:
    """The options of a CASE recipe file, keys spelled with ``_``, free-text keys (``description``, ...) dropped.

    Raises:
        RecipeError: the file cannot be read as a recipe, has an unknown key or names one option twice.
    """
    source = str(path)
    options: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for raw_key, value in read_recipe_file(path, what="CASE recipe").items():
        key = str(raw_key).replace("-", "_")
        if key not in DEFAULTS and key not in META_KEYS:
            raise unknown_key(key, [*DEFAULTS, *META_KEYS], "", source)
        if key in spelled:
            raise RecipeError(f"{source}: {key!r} is given twice (as {spelled[key]!r} and {raw_key!r})")
        spelled[key] = str(raw_key)
        if key in DEFAULTS:
            options[key] = value
    return options


def resolve_options(command_line: Mapping[str, Any] | None = None, recipe: str | Path | None = None) -> dict[str, Any]:
    """Merge command line > recipe > defaults into one checked option dict.

    Args:
        command_line: option values given on the command line (or by a caller); None means "not given". Keys are
            option names of :data:`DEFAULTS` (``-`` or ``_``).
        recipe: a CASE recipe file (see the module docstring), or None.

    Returns:
        every option of :data:`DEFAULTS`, with ``cache_dir`` filled in (:func:`default_cache_dir`), ``eval`` as a
        list, and ``recipe`` (the file as given, or None).

    Raises:
        RecipeError: an unknown key or an invalid value; the message names the recipe file or the command line.
    """
    options = dict(DEFAULTS)
    sources = dict.fromkeys(DEFAULTS, "defaults")
    if recipe is not None:
        for key, value in read_case_recipe(recipe).items():
            options[key], sources[key] = value, str(recipe)
    for raw_key, value in (command_line or {}).items():
        key = str(raw_key).replace("-", "_")
        if key not in DEFAULTS:
            raise unknown_key(key, DEFAULTS, "", COMMAND_LINE)
        if value is not None:
            options[key], sources[key] = value, COMMAND_LINE
    if options["cache_dir"] is None:
        options["cache_dir"] = str(default_cache_dir())
    if isinstance(options["eval"], str):
        options["eval"] = [options["eval"]]
    check_options(options, sources)
    options["recipe"] = str(recipe) if recipe is not None else None
    return options


def check_options(options: dict[str, Any], sources: Mapping[str, str] | str = "options") -> None:
    """Check the values of merged CASE options; numbers written as strings (YAML reads ``1e-3`` as one) become
    floats in place.

    Args:
        options: the merged options.
        sources: where each key's value came from (a recipe file, ``"command line"``), or one name for all.

    Raises:
        RecipeError: naming the source and the key of the first invalid value.
    """

    def fail(key: str, expected: str, hint: str = "") -> RecipeError:
        source = sources if isinstance(sources, str) else sources.get(key, "options")
        return RecipeError(f"{source}: {key!r} must be {expected}, got {options[key]!r}{hint}")

    for key, allowed in CHOICES.items():
        if options[key] not in allowed:
            raise fail(key, f"one of {list(allowed)}", did_you_mean(str(options[key]), allowed))
    for key in POSITIVE_INTEGERS:
        value = options[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise fail(key, "a positive integer")
    for key in NUMBERS:
        value = options[key]
        if isinstance(value, str):
            try:
                options[key] = value = float(value)
            except ValueError:
                raise fail(key, "a number") from None
        if value is None and key == "dropout":
            continue  # the projection kind's default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail(key, "a number")
    for key in BOOLEANS:
        if not isinstance(options[key], bool):
            raise fail(key, "true or false")
    if options["dropout"] is not None and not 0 <= options["dropout"] < 1:
        raise fail("dropout", "in [0, 1) (or unset for the default of the projection kind)")
    if not options["lr"] > 0:
        raise fail("lr", "greater than 0")
    if not 0 < options["dev_fraction"] < 1:
        raise fail("dev_fraction", "in (0, 1)")
    if options["label_divisor"] == 0:
        raise fail("label_divisor", "a non-zero number")
    try:
        parse_dims(options["dims"], width=1)
    except ValueError as err:
        raise fail("dims", f"comma-separated positive integers or 'full' ({err})") from None
