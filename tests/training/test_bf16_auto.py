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


def test_cpu_description_names_the_model_and_avx512(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n"
        "processor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n",
        encoding="utf-8",
    )
    assert results.cpu_description(info) == {"model": "AMD EPYC", "avx512": True}
    info.write_text("model name\t: Some CPU\nflags\t: fpu avx2 avx512_bf16_like\n", encoding="utf-8")
    assert results.cpu_description(info) == {"model": "Some CPU", "avx512": False}  # whole flags only
    assert results.cpu_description(tmp_path / "missing") is None
    assert "cpu" in results.hardware_info()


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


def test_cpu_bf16_flags_reads_arm_features(tmp_path: Path) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\nCPU implementer\t: 0x41\n", encoding="utf-8")
    assert results.cpu_bf16_flags(path) == ["bf16"]


def test_auto_on_a_gpu_asks_for_native_bf16(monkeypatch) -> None:
    import torch

    asked: list[dict] = []

    def supported(**kwargs) -> bool:
        asked.append(kwargs)
        return False  # a pre-Ampere GPU: bf16 only emulated

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", supported)
    assert resolve_bf16("auto", use_cpu=False) == (False, "auto: the GPU has no native bf16")
    assert asked == [{"including_emulation": False}]
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda **kwargs: True)
    assert resolve_bf16("auto", use_cpu=False) == (True, "auto: the GPU supports bf16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_bf16("auto", use_cpu=False) == (False, "auto: no CUDA device is visible, so fp32")


def test_auto_is_off_beside_fp16_and_follows_use_cpu(monkeypatch) -> None:
    import torch

    from finesim.training.arguments import bf16_setting

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda **kwargs: True)
    monkeypatch.setattr(results, "cpu_bf16_flags", lambda: ["avx512_bf16"])

    def recipe(**train) -> Recipe:
        r = recipe_from_dict({"train": {"bf16": "auto", **train}}, source="r.yaml")
        assert isinstance(r, Recipe)
        return r

    assert bf16_setting(recipe()) == (True, "auto: the GPU supports bf16")
    assert bf16_setting(recipe(trainer_args={"fp16": True})) == (False, "auto: train.trainer_args sets fp16")
    on, why = bf16_setting(recipe(trainer_args={"use_cpu": True}))  # the CPU's flags decide, not the GPU
    assert not on and "avx512_bf16 but no AMX" in why


def test_the_dry_run_says_what_auto_chose(shared_data: Path, tmp_path: Path, monkeypatch) -> None:
    from finesim.training import load_recipe
    from finesim.training.preflight import preflight

    monkeypatch.setattr(results, "cpu_bf16_flags", lambda: [])
    repo = Path(__file__).resolve().parents[2]
    main_job = load_recipe(repo / "recipes" / "csts" / "minilm-bi-mse-tuned.yaml")
    summary = preflight(main_job, output_dir=tmp_path / "out", data_root=str(shared_data)).summary()
    assert any(line.startswith("train.bf16 auto: fp32") and "bf16 autocast off" in line for line in summary), summary


def test_a_resume_where_auto_chooses_otherwise_is_another_run(shared_data: Path, tmp_path: Path, monkeypatch) -> None:
    from finesim.training import load_recipe
    from finesim.training.preflight import fingerprint_changes, preflight, run_fingerprint

    repo = Path(__file__).resolve().parents[2]
    main_job = load_recipe(repo / "recipes" / "csts" / "minilm-bi-mse-tuned.yaml")
    monkeypatch.setattr(results, "cpu_bf16_flags", lambda: ["avx512_bf16"])
    pre = preflight(main_job, output_dir=tmp_path / "out", data_root=str(shared_data))
    assert pre.fingerprint["recipe"]["train.bf16 (auto chose)"] is False
    monkeypatch.setattr(results, "cpu_bf16_flags", lambda: ["avx512_bf16", "amx_bf16"])  # an AMX machine
    elsewhere = run_fingerprint(main_job, pre.train, pre.validation)
    assert fingerprint_changes(pre.fingerprint, elsewhere) == ["train.bf16 (auto chose): False -> True"]


@pytest.mark.parametrize(("capability", "expected"), [((7, 0), False), ((8, 0), True)])
def test_an_older_torch_without_including_emulation_asks_for_ampere(monkeypatch, capability, expected) -> None:
    import torch

    def old_signature() -> bool:  # torch < 2.3: no keyword
        return True

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", old_signature)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: capability)
    assert resolve_bf16("auto", use_cpu=False)[0] is expected
