"""finesim.options.resolve_options: an option's value must be of its default's kind (a quoted "false" for a yes/no
option was truthy, and silently on); numbers written as text or whole floats are read as the default's type; options
that take several kinds (a text default such as LoRA's target_modules, which also takes a list) are left to their
users."""

from __future__ import annotations

import re

import pytest

from finesim.options import resolve_options

DEFAULTS = {"flag": False, "count": 1, "rate": 0.05, "modules": "all-linear", "dim": None}


def test_values_of_the_defaults_kind_are_kept_or_read_as_it() -> None:
    given = {"flag": True, "count": 32.0, "rate": "5e-2", "modules": ["q_proj", "v_proj"], "dim": 64}
    resolved = resolve_options("objective 'x'", DEFAULTS, given)
    assert resolved == {"flag": True, "count": 32, "rate": 0.05, "modules": ["q_proj", "v_proj"], "dim": 64}
    assert type(resolved["count"]) is int and type(resolved["rate"]) is float
    assert resolve_options("objective 'x'", DEFAULTS, {"rate": 1})["rate"] == 1  # an int for a float: as given


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("flag", "false", "option 'flag' must be true or false, got text 'false'"),
        ("flag", 0, "option 'flag' must be true or false, got 0 (int)"),
        ("count", 2.5, "option 'count' must be a whole number, got 2.5 (float)"),
        ("count", True, "option 'count' must be a whole number, got True (bool)"),
        ("rate", "fast", "option 'rate' must be a number, got text 'fast'"),
        ("rate", "nan", "option 'rate' must be a number, got text 'nan'"),
    ],
)
def test_a_value_of_another_kind_is_an_error_naming_the_option(option: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(f"objective 'x': {message}")):
        resolve_options("objective 'x'", DEFAULTS, {option: value})
