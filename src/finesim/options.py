"""Option dictionaries: defaults, unknown keys with a did-you-mean hint, and recipe files read strictly.

Shared by recipes of every method (:mod:`finesim.training.recipe`), encoder and objective options and evaluation task
files (:mod:`finesim.evaluation.tasks`): a typo is always an error that names the file and the key, never a silent
default. It imports nothing from finesim, so every layer may use it.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml


class RecipeError(ValueError):
    """A recipe that cannot be used; the message names the file and the key."""


def did_you_mean(key: str, allowed: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for the closest allowed name (``prefix`` before it, e.g. ``case.``), or an empty
    string; a ``-`` spelling of an allowed ``_`` name finds that name."""
    names = [str(a) for a in allowed]
    spelled = str(key).replace("-", "_")
    close = [spelled] if spelled in names else difflib.get_close_matches(str(key), names, n=1)
    return f" (did you mean {prefix + close[0]!r}?)" if close else ""


def unknown_key(key: str, allowed: Iterable[str], where: str, source: str) -> RecipeError:
    """The error for an unknown key ``where + key`` in ``source`` (``where``: its section, dotted, e.g. ``case.``),
    quoted whole, with a did-you-mean hint and the allowed keys."""
    allowed = sorted(str(a) for a in allowed)
    hint = did_you_mean(key, allowed, where)
    return RecipeError(f"{source}: unknown key {where + str(key)!r}{hint}; allowed: {allowed}")


def resolve_options(
    what: str, defaults: Mapping[str, Any], options: Mapping[str, Any] | None, key: str = "options"
) -> dict[str, Any]:
    """``defaults`` updated with ``options``; an option not in ``defaults`` is an error naming ``what``, and so is a
    value of another kind than its default's (:func:`option_value`: ``"false"`` for a yes/no option)."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        allowed = f"its {key} are {sorted(defaults)}" if defaults else f"it takes no {key}"
        hint = did_you_mean(unknown[0], defaults) if len(unknown) == 1 else ""
        raise ValueError(f"{what} has no option(s) {unknown}{hint}; {allowed}")
    return {**defaults, **{name: option_value(what, name, value, defaults[name]) for name, value in options.items()}}


def option_value(what: str, name: str, value: Any, default: Any) -> Any:
    """``value`` checked against its default's kind: a yes/no option (a bool default) takes true or false only (a
    quoted ``"false"`` was truthy, and silently on); a number option (an int or float default) a number, also
    written as text (``"5e-2"``, which YAML 1.1 reads as text) or, for a whole number, as ``32.0``: returned as the
    default's type. Other options (a None, text, list or mapping default: some take several kinds, such as LoRA's
    ``target_modules``) are checked where they are used."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        kind = "true or false"
    elif isinstance(default, (int, float)):
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
        if isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number):
            if isinstance(default, float):
                return float(number) if isinstance(value, str) else number
            if float(number).is_integer():
                return int(number)
        kind = "a whole number" if isinstance(default, int) else "a number"
    else:
        return value
    got = f"text {value!r}" if isinstance(value, str) else f"{value!r} ({type(value).__name__})"
    raise ValueError(f"{what}: option {name!r} must be {kind}, got {got}")


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping key given twice (PyYAML keeps the last one silently)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key {key!r} appears twice (first on line {seen[key] + 1}); remove one",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate keys."""
    return yaml.load(text, Loader=_StrictLoader)


class _DuplicateJSONKey(ValueError):
    pass


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object that refuses a key given twice (``json.loads`` keeps the last one silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateJSONKey(key)
        out[key] = value
    return out


def read_recipe_file(path: str | Path, *, what: str = "recipe") -> dict[str, Any]:
    """Read a YAML or JSON recipe file into a mapping.

    Raises:
        RecipeError: the file is missing, not valid YAML/JSON, has a key twice, is empty, or is not a mapping; the
            message names the file (and the line for syntax errors).
    """
    p = Path(path)
    if not p.is_file():
        hint = " (it is a folder)" if p.is_dir() else ""
        raise RecipeError(f"{what} file {str(p)!r} does not exist{hint}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise RecipeError(f"{p}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    if not text.strip():
        raise RecipeError(f"{p}: the {what} file is empty")
    try:
        data = json.loads(text, object_pairs_hook=_json_object) if p.suffix == ".json" else parse_yaml(text)
    except _DuplicateJSONKey as err:
        raise RecipeError(f"{p}: key {err.args[0]!r} appears twice in one object; remove one") from None
    except json.JSONDecodeError as err:
        raise RecipeError(f"{p}: not valid JSON: {err}") from None
    except yaml.YAMLError as err:
        raise RecipeError(f"{p}: not valid YAML: {' '.join(str(err).split())}") from None
    if data is None:
        raise RecipeError(f"{p}: the {what} file is empty")
    if not isinstance(data, dict):
        raise RecipeError(f"{p}: a {what} must be a mapping of keys to values, got {type(data).__name__}")
    return data
