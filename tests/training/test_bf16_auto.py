"""``train.bf16: auto``: bf16 autocast where it is known to be fast (a bf16 GPU, a CPU with AMX), else fp32, and the
CPU flags that decide it, as results files record them."""

from __future__ import annotations

from pathlib import Path

import pytest

import finesim.results as results
from finesim.training import recipe_from_dict
from finesim.training.arguments import resolve_bf16
from finesim.training.recipe import Recipe, RecipeError
from finesim.training.runner import training_arguments

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu vme sse2 avx2 avx512f {extra}
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: fpu vme sse2 avx2 avx512f {extra}
"""


def _cpuinfo(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(extra=extra), encoding="utf-8")
    return path


def test_cpu_bf16_flags_reads_the_flags_lines(tmp_path: Path) -> None:
    assert results.cpu_bf16_flags(_cpuinfo(tmp_path, "amx_tile avx512_bf16 amx_bf16")) == [
        "avx512_bf16",
        "amx_bf16",
        "amx_tile",
    ]  # in BF16_CPU_FLAGS's order
    assert results.cpu_bf16_flags(_cpuinfo(tmp_path, "")) == []
    assert results.cpu_bf16_flags(_cpuinfo(tmp_path, "avx512_bf16_like")) == []  # whole flags only
    assert results.cpu_bf16_flags(tmp_path / "missing") is None  # not Linux: unknown, not "none"
    assert "cpu_bf16_flags" in results.hardware_info()


@pytest.mark.parametrize(
    ("flags", "expected", "reason"),
    [
        (["avx512_bf16", "amx_bf16", "amx_tile"], True, "auto: the CPU has AMX (amx_bf16)"),
        (["avx512_bf16"], False, "it lists avx512_bf16 but no AMX"),
        ([], False, "it lists no bf16 instructions"),
        (None, False, "cannot be read"),
    ],
)
def test_auto_on_a_cpu_follows_amx(monkeypatch, flags, expected, reason) -> None:
    monkeypatch.setattr(results, "cpu_bf16_flags", lambda: flags)
    on, why = resolve_bf16("auto", use_cpu=True)
    assert on is expected and reason in why


def test_true_and_false_are_kept_and_other_values_refused(monkeypatch) -> None:
    monkeypatch.setattr(results, "cpu_bf16_flags", lambda: [])
    assert resolve_bf16(True, use_cpu=True) == (True, "as the recipe sets it")  # asked for: kept, even if slow
    assert resolve_bf16(False, use_cpu=True) == (False, "as the recipe sets it")
    with pytest.raises(RecipeError, match=r"train\.bf16 must be true, false or 'auto', got 'yes'"):
        resolve_bf16("yes", use_cpu=True)


def test_the_recipe_takes_auto_and_refuses_other_strings() -> None:
    recipe = recipe_from_dict({"train": {"bf16": "auto"}}, source="r.yaml")
    assert isinstance(recipe, Recipe) and recipe.train.bf16 == "auto"
    with pytest.raises(RecipeError, match=r"train\.bf16"):
        recipe_from_dict({"train": {"bf16": "sometimes"}}, source="r.yaml")


@pytest.mark.parametrize(("flags", "expected"), [(["amx_bf16"], True), (["avx512_bf16"], False)])
def test_auto_reaches_the_trainer_resolved(monkeypatch, tmp_path: Path, caplog, flags, expected) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(results, "cpu_bf16_flags", lambda: flags)
    recipe = recipe_from_dict({"train": {"bf16": "auto"}}, source="r.yaml")
    assert isinstance(recipe, Recipe)
    with caplog.at_level("INFO", logger="finesim"):
        args = training_arguments(recipe, tmp_path, has_eval=True, cross=False)
    assert args.bf16 is expected
    assert f"bf16 autocast {'on' if expected else 'off'}" in caplog.text
