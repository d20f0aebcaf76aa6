"""The one recipe schema: every shipped recipe through the one loader and the dry-run checks, the trainer's arguments
passed through ``train.trainer_args``, and the main job's training arguments as they were before the schema moved to
pydantic (the recipe as it was then: tests/training/expected/minilm-bi-mse-tuned.yaml; issue 42 has since changed the
shipped one on purpose)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import finesim.models.hub as hub
from finesim.data.errors import DataFormatError
from finesim.training import load_recipe, recipe_from_dict
from finesim.training.preflight import preflight, resolve_data_path, run_fingerprint
from finesim.training.recipe import CaseRecipe, Recipe, RecipeError, check_recipe
from finesim.training.runner import training_arguments

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes").rglob("*.yaml"))
MAIN_JOB = REPO / "recipes" / "csts" / "minilm-bi-mse-tuned.yaml"
FAST = {MAIN_JOB, *(REPO / "recipes" / "case").glob("*.yaml")}  # the rest read C-STS/SNLI each: slow
# the main job's recipe as it was when the schema moved to pydantic (3 epochs, fp32, chosen on validation)
MAIN_JOB_BEFORE = Path(__file__).parent / "expected" / "minilm-bi-mse-tuned.yaml"


def _offline_or_stand_in(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Model resolution that stands in for a model not available offline (a Hub id this machine cannot fetch, a
    stage-1 output not trained here): only the model lookup is skipped, every other check runs. Returns the names
    stood in for."""
    real, stood_in = hub.resolve_model_path, []

    def resolve(name: str) -> str:
        try:
            return real(name)
        except hub.ModelResolutionError:
            stood_in.append(name)
            return f"<{name}: not available offline>"

    monkeypatch.setattr(hub, "resolve_model_path", resolve)
    return stood_in


def _absent_data(recipe: Recipe, root: Path) -> list[Path]:
    """The recipe's data files that the shared data does not hold (made by another command, or downloaded by
    the user, as the recipe's comments say)."""
    files = [resolve_data_path(p, str(root)) for p in (recipe.data.train, recipe.data.validation) if p]
    return [p for p in files if not p.exists()]


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=() if p in FAST else pytest.mark.slow) for p in RECIPES],
    ids=[str(p.relative_to(REPO / "recipes")) for p in RECIPES],
)
def test_every_shipped_recipe_passes_the_dry_run_checks(
    path: Path, shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``finesim train RECIPE --dry-run`` checks, for every recipe under recipes/ (every method, recipes added
    later included): the schema, the tables of encoders/objectives/formats, the data and the output folder; only
    models not available offline are stood in for."""
    recipe = load_recipe(path)
    stood_in = _offline_or_stand_in(monkeypatch)
    if isinstance(recipe, CaseRecipe):
        from finesim.case.pipeline import check_case

        options, lines = check_case(recipe, output_dir=tmp_path / "out", data=shared_data)
        assert options["train"] == str(shared_data / "csts" / "train.csv") and lines[-1].startswith("output folder")
        assert stood_in in ([], [recipe.case.model])
        return
    check_recipe(recipe)
    absent = _absent_data(recipe, shared_data)
    if absent:  # the dry run stops there, naming the file
        with pytest.raises(DataFormatError, match="not found"):
            preflight(recipe, output_dir=tmp_path / "out", data_root=str(shared_data))
        return
    checked = preflight(recipe, output_dir=tmp_path / "out", data_root=str(shared_data))
    assert checked.action == "start" and len(checked.train.dataset) > 0
    assert stood_in in ([], [recipe.model.backbone])


def test_recipes_of_every_method_are_shipped() -> None:
    methods = {load_recipe(p).method for p in RECIPES}
    assert methods == {"sentence-transformers", "case"}


# ------------------------------------------------------------------ behaviour kept


def _plain(args: Any) -> dict[str, Any]:
    """``to_dict()`` of training arguments, as the expected file stores them (non-plain values as repr)."""
    out = {k: v if isinstance(v, (str, int, float, bool)) or v is None else repr(v) for k, v in args.to_dict().items()}
    out["batch_sampler"] = repr(args.batch_sampler)
    return out


def test_main_job_training_arguments_are_unchanged(tmp_path: Path) -> None:
    """The main job's arguments, every field, equal those finesim built before the schema moved to pydantic
    (tests/training/expected/, written with that code): the same run, seeds and data order."""
    expected = json.loads((Path(__file__).parent / "expected" / "minilm-bi-mse-tuned.training-args.json").read_text())
    args = _plain(training_arguments(load_recipe(MAIN_JOB_BEFORE), tmp_path, has_eval=True, cross=False))
    assert args.pop("output_dir") == str(tmp_path / "checkpoints")
    for key in ("use_cpu", "dataloader_pin_memory", "hub_token"):  # follow the machine, or a secret
        args.pop(key)
    expected["arguments"].pop("output_dir")
    assert args == expected["arguments"]
    assert (args["learning_rate"], args["seed"], args["data_seed"], args["num_train_epochs"]) == (1e-4, 42, 42, 3.0)


def test_main_job_fingerprint_keys_are_unchanged(shared_data: Path, tmp_path: Path) -> None:
    """The main job's fingerprint holds every key and value it held before the schema moved to pydantic
    (tests/training/expected/, computed with that code), plus ``method``: a run started then resumes now."""
    from finesim.training.preflight import fingerprint_changes

    stored = json.loads((Path(__file__).parent / "expected" / "minilm-bi-mse-tuned.fingerprint.json").read_text())
    old = {"recipe": stored["recipe"], "data": stored["data"]}
    recipe = load_recipe(MAIN_JOB_BEFORE)
    pre = preflight(recipe, output_dir=tmp_path / "out", data_root=str(shared_data))
    new = run_fingerprint(recipe, pre.train, pre.validation)
    assert sorted(set(new["recipe"]) - set(old["recipe"])) == ["method"]  # a renamed or dropped key shows here
    assert {k: v for k, v in new["recipe"].items() if k != "method"} == old["recipe"]
    assert new["recipe"]["method"] == "sentence-transformers" and new["data"] == old["data"]
    assert fingerprint_changes(old, new) == []  # what the resume check says
    assert not any(k.startswith("train.trainer_args") for k in new["recipe"])  # empty: no key


def test_main_job_is_the_screened_run() -> None:
    """The shipped main job is the learning-rate screen's chosen run (study levers-csts-minilm, run minilm-lr1e-4 of
    benchmarks/claims/plan.yaml, trained as the recipe then was plus the run's overrides): the two agree in every
    key, so the figures README quotes from that run's seeds belong to this recipe; and it selects on a dev split
    carved from train, never on validation."""
    import yaml

    plan = yaml.safe_load((REPO / "benchmarks" / "claims" / "plan.yaml").read_text(encoding="utf-8"))
    chosen = next(run for run in plan["studies"]["levers-csts-minilm"] if run["id"] == "minilm-lr1e-4")
    assert (REPO / chosen["recipe"]).resolve() == MAIN_JOB
    shipped = load_recipe(MAIN_JOB)
    # the screened runs trained the recipe as it was then with the run's overrides: every key must come out equal,
    # but bf16 autocast, which the shipped recipe leaves to the machine ("auto": fp32 where bf16 is slow); the
    # screen's fp32 control (levers2-csts-minilm/minilm-fp32-control) is the same run in fp32
    screened = load_recipe(MAIN_JOB_BEFORE, chosen["set"]).model_dump()
    assert (screened["train"].pop("bf16"), shipped.train.bf16) == (True, "auto")
    shipped_dump = shipped.model_dump()
    shipped_dump["train"].pop("bf16")
    assert screened == shipped_dump
    control = next(run for run in plan["studies"]["levers2-csts-minilm"] if run["id"] == "minilm-fp32-control")
    fp32 = load_recipe(MAIN_JOB, control["set"]).model_dump()
    assert fp32["train"].pop("bf16") is False and fp32 == shipped_dump
    assert isinstance(shipped, Recipe)
    assert (shipped.data.dev_fraction, shipped.data.dev_seed, shipped.train.keep) == (0.1, 42, "best")


def test_the_headline_csts_recipe_is_the_claims_run() -> None:
    """recipes/csts/mpnet-bi-mse-accum4.yaml ships the claims run ccl-mpnet/mpnet-mse (paper-bi-mse.yaml with its
    plan.yaml overrides), whose three seeds give README's C-STS figure: every key but the name and folder agrees."""
    import yaml

    plan = yaml.safe_load((REPO / "benchmarks" / "claims" / "plan.yaml").read_text(encoding="utf-8"))
    run = next(r for r in plan["studies"]["ccl-mpnet"] if r["id"] == "mpnet-mse")
    trained = load_recipe(REPO / run["recipe"], run["set"]).model_dump()
    shipped = load_recipe(REPO / "recipes" / "csts" / "mpnet-bi-mse-accum4.yaml").model_dump()
    for dump in (trained, shipped):
        for key in ("name", "output_dir", "description"):
            dump.pop(key, None)
    assert trained == shipped
    assert (shipped["data"]["dev_fraction"], shipped["data"]["dev_seed"], shipped["train"]["keep"]) == (0.1, 42, "best")


# ------------------------------------------------------------------ train.trainer_args


def _bi(**train: Any) -> Recipe:
    recipe = recipe_from_dict({"train": train}, source="r.yaml")
    assert isinstance(recipe, Recipe)
    return recipe


def test_trainer_args_reach_the_training_arguments(tmp_path: Path) -> None:
    """Options finesim has no key for reach the trainer's arguments unchanged, and change nothing else."""
    plain = _plain(training_arguments(_bi(), tmp_path, has_eval=True, cross=False))
    # activation_checkpointing: transformers 5's name of gradient_checkpointing (which it still takes, with a warning)
    passed = {"activation_checkpointing": True, "dataloader_drop_last": True, "logging_first_step": True}
    recipe = _bi(trainer_args=passed)
    check_recipe(recipe)
    args = training_arguments(recipe, tmp_path, has_eval=True, cross=False)
    assert (args.activation_checkpointing, args.dataloader_drop_last, args.logging_first_step) == (True, True, True)
    changed = {k for k, v in _plain(args).items() if plain[k] != v}
    assert changed - {"gradient_checkpointing"} == set(passed)  # transformers mirrors it into the old name
    cross = recipe_from_dict({"model": {"encoder": "cross"}, "train": {"trainer_args": {"dataloader_drop_last": True}}})
    check_recipe(cross)  # checked against CrossEncoderTrainingArguments
    assert training_arguments(cross, tmp_path, has_eval=True, cross=True).dataloader_drop_last is True


@pytest.mark.parametrize(
    ("trainer_args", "message"),
    [
        (
            {"gradient_checkpointng": True},
            r"trainer_args\.gradient_checkpointng' \(did you mean 'train\.trainer_args\.gradient_checkpointing'\?\)",
        ),
        ({"output_dir": "x"}, r"trainer_args\.output_dir is not passed through: finesim sets it from the run's folder"),
        ({"num_train_epochs": 1}, r"trainer_args\.num_train_epochs is not passed through: .* from train\.epochs$"),
        ({"learning_rate": 1.0}, r"trainer_args\.learning_rate is not passed through: .* from train\.learning_rate$"),
        ({"save_strategy": "no"}, r"trainer_args\.save_strategy .* from train\.eval_strategy"),
        ({"data_seed": 1}, r"trainer_args\.data_seed .* from the recipe's seed$"),
        ({"bf16": True}, r"trainer_args\.bf16 .* from train\.bf16$"),
        ({"learning_rate_mapping": {}}, r"trainer_args\.learning_rate_mapping .* train\.layer_lr_decay"),
    ],
)
def test_trainer_args_errors(trainer_args: dict[str, Any], message: str) -> None:
    with pytest.raises(RecipeError, match=r"^r\.yaml: (unknown key ')?train\." + message):
        check_recipe(_bi(trainer_args=trainer_args))


def test_a_bad_override_is_named_instead_of_the_file(tmp_path: Path) -> None:
    """``--set train.epoch=1`` was reported as the recipe file's unknown key; the file holds no such key. The override
    is named as given (``--set`` on the command line, ``overrides`` in Python)."""
    path = tmp_path / "r.yaml"
    path.write_text("model: {backbone: m}\ntrain: {epochs: 2}\n", encoding="utf-8")
    with pytest.raises(
        RecipeError, match=rf"^override 'train\.epoch=1' \(on {path}\): unknown key 'train\.epoch' \(did you"
    ):
        load_recipe(path, ["train.batch_size=8", "train.epoch=1"])
    with pytest.raises(RecipeError, match=rf"^override 'train\.epochs=-1' \(on {path}\): train\.epochs must be >= 0"):
        load_recipe(path, ["train.epochs=-1"])
    # an override that breaks the recipe only until a later one mends it is not blamed (tri needs the head that follows)
    with pytest.raises(RecipeError, match=rf"^override 'train\.epoch=1' \(on {path}\): unknown key 'train\.epoch'"):
        load_recipe(path, ["model.encoder=tri", "model.head=hadamard", "train.epoch=1"])
    # the file's own problem is still the file's, with or without overrides
    path.write_text("model: {backbone: m}\ntrain: {epochz: 2}\n", encoding="utf-8")
    with pytest.raises(RecipeError, match=rf"^{path}: unknown key 'train\.epochz'"):
        load_recipe(path, ["train.batch_size=8"])
    # an override that mends a file passes
    path.write_text("model: {backbone: m}\ndata: {format: table, train: p.csv}\n", encoding="utf-8")
    with pytest.raises(RecipeError, match=rf"^{path}: data\.validation is not set"):
        load_recipe(path)
    assert load_recipe(path, ["data.validation=null"]).data.validation is None


def test_a_value_no_member_of_a_union_takes_names_the_key_and_every_choice() -> None:
    """pydantic reports a union per member (``train.bf16.bool``, ``train.bf16.literal['auto']``): one key, its
    choices."""
    for value in ("maybe", 3):
        with pytest.raises(
            RecipeError, match=rf"^r\.yaml: train\.bf16 must be true or false, or 'auto', got {value!r}$"
        ):
            recipe_from_dict({"train": {"bf16": value}}, source="r.yaml")
    # a mapping's key that reads like a type tag is a key, not a union member
    table = {"format": "table", "train": "p.csv", "validation": None, "columns": {"int": 1}}
    with pytest.raises(RecipeError, match=r"^r\.yaml: data\.columns\.int must be text, got 1$"):
        recipe_from_dict({"data": table}, source="r.yaml")


def test_trainer_args_values_are_checked_by_the_dry_run(shared_data: Path, tmp_path: Path) -> None:
    recipe = _bi(trainer_args={"optim": "adamx"})
    check_recipe(recipe)  # a known name: its value is the trainer's to check
    with pytest.raises(RecipeError, match=r"^r\.yaml: train\.trainer_args: .*adamx"):
        preflight(recipe, output_dir=tmp_path / "out", data_root=str(shared_data))
    keys = run_fingerprint(_bi(trainer_args={"dataloader_drop_last": True}), *_loaded(shared_data))["recipe"]
    assert keys["train.trainer_args.dataloader_drop_last"] is True  # a resume with another value is refused


def _loaded(root: Path) -> tuple[Any, Any]:
    from finesim.training.preflight import load_data

    recipe = _bi()
    return load_data(recipe, "train", str(root)), None


def test_an_empty_override_value_or_an_emptied_section_is_refused(tmp_path: Path) -> None:
    """``--set data.validation=`` (an unset shell variable) meant null, and ``--set data=`` put the data section back
    to C-STS, both without a word."""
    path = tmp_path / "r.yaml"
    path.write_text("model: {backbone: m}\ndata: {format: table, train: p.csv, validation: v.csv}\n", encoding="utf-8")
    with pytest.raises(
        RecipeError,
        match=r"^override 'data\.validation=' has no value \(an unset shell variable\?\): "
        r"write data\.validation=null for null",
    ):
        load_recipe(path, ["data.validation="])
    for item in ("data=", "data=null", "data={}", "train= "):
        with pytest.raises(RecipeError, match=r"empties the whole (data|train) section|has no value"):
            load_recipe(path, [item])
    with pytest.raises(RecipeError, match=r"^override 'data=\{\}' empties the whole data section"):
        load_recipe(path, ["data={}"])
    assert load_recipe(path, ["data.validation=null"]).data.validation is None
