"""benchmarks/results_page.py: docs/results.md is what the script writes from the committed results JSON, its tables'
numbers recompute from those files (worked out here independently of the script), and the README's front door
quotes the same headline numbers."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
import statistics
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
PAGE = REPO / "docs" / "results.md"
README = REPO / "README.md"


@pytest.fixture(scope="module")
def page_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("results_page", REPO / "benchmarks" / "results_page.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table(text: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after ``heading`` (header and separator rows dropped)."""
    lines = text[text.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def seeds_in_order(paths: list[Path]) -> list[dict]:
    results = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    return sorted(results, key=lambda r: (r["seed"] != 42, r["seed"]))


@pytest.mark.usefixtures("shared_data")  # the pages read C-STS validation from the data root
def test_the_committed_page_and_figure_are_what_the_script_writes(page_script: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "img" / page_script.FIGURE
    assert page_script.figure(RESULTS, out) == out
    assert out.stat().st_size < 200_000, "keep the figure small"
    assert (REPO / "docs" / "img" / page_script.FIGURE).is_file(), "run python benchmarks/results_page.py"
    regenerated = page_script.build(RESULTS, page_script.FIGURE)
    assert regenerated == PAGE.read_text(encoding="utf-8"), (
        "docs/results.md is out of date with benchmarks/results/: run python benchmarks/results_page.py"
    )


def test_every_number_of_the_best_models_table_recomputes() -> None:
    rows = table(PAGE.read_text(encoding="utf-8"), "## Best models")
    assert len(rows) >= 4
    for cells in rows:
        files = cells[-1].strip("`")
        folder, stem = files.rsplit("/", 1)
        paths = sorted((RESULTS / folder).glob(stem.split("__seed")[0] + "__seed*.json"))
        results = seeds_in_order(paths)
        metric = "csts" if cells[0] == "C-STS" else "sts"
        values = [
            r["report"]["scores"]["CSTS-validation"] if metric == "csts" else r["report"]["averages"]["sts"]
            for r in results
        ]
        dev = [(r["train"].get("dev") or r["train"].get("validation"))["spearman"] for r in results]
        assert cells[3] == ", ".join(str(r["seed"]) for r in results)
        assert cells[4].startswith(mean_sd(dev))
        if len(dev) > 1:
            assert cells[4].endswith("(" + ", ".join(f"{v:.2f}" for v in dev) + ")")
        assert cells[5] == f"**{mean_sd(values)}**"
        assert cells[6] == ", ".join(f"{v:.2f}" for v in values)
        goal = re.match(r"≥ (\d+\.\d)", cells[7])
        if goal:
            met = statistics.mean(values) >= float(goal.group(1))
            assert cells[7].endswith("**met**" if met else "**not met**")
        # a resumed run times its last sitting only (sittings recorded, or the checkpoint its trainer resumed from)
        was_resumed = [
            len(r.get("seconds_sittings") or []) > 1 or bool(r["train"].get("resumed_from")) for r in results
        ]
        timed = [r for r, res in zip(results, was_resumed) if r["train"].get("wall_seconds") and not res]
        minutes = [round(r["train"]["wall_seconds"] / 60) for r in timed]
        resumed = sum(was_resumed)
        if resumed:
            assert f"; {resumed} resumed run" in cells[8]
        if minutes:
            span = f"{min(minutes)}–{max(minutes)} min" if min(minutes) != max(minutes) else f"{minutes[0]} min"
            assert cells[8].startswith(span)


def test_every_number_of_the_main_job_table_recomputes() -> None:
    """The shipped main job's row: the screen's chosen run's seeds (dev and validation), seed 42's dev Spearman per
    epoch and the idle-machine time, each from its results file."""
    (cells,) = table(PAGE.read_text(encoding="utf-8"), "## The main job")
    assert cells[0] == "`csts/minilm-bi-mse-tuned.yaml`"
    folder = RESULTS / "claims" / "levers-csts-minilm"
    results = sorted(
        (json.loads(f.read_text(encoding="utf-8")) for f in folder.glob("minilm-lr1e-4__seed*.json")),
        key=lambda d: (d["seed"] != 42, d["seed"]),
    )
    values = [d["report"]["scores"]["CSTS-validation"] for d in results]
    assert cells[4] == ", ".join(str(d["seed"]) for d in results)
    assert cells[5] == mean_sd([d["train"]["dev"]["spearman"] for d in results])
    assert cells[6] == f"**{mean_sd(values)}**"
    assert cells[7] == ", ".join(f"{v:.2f}" for v in values)
    epochs = [e["eval_dev_spearman"] for e in results[0]["train"]["evaluations"]]
    assert cells[8] == ", ".join(f"{v:.2f}" for v in epochs)
    text = PAGE.read_text(encoding="utf-8")
    met = statistics.mean(values) >= 70.0 and len(values) >= 3
    goal = "Goal (issue 42): ≥ 70.0 mean validation Spearman over 3 seeds, selection on dev only: "
    assert goal + ("**met**" if met else "**not met**") in text
    # the shipped recipe, timed on each host (results_page.MAIN_JOB_TIMINGS): fp32 without AMX, bf16 with it
    timed = [n for n in ("main_job_bf16_auto.json", "main_job_amx.json") if (RESULTS / n).is_file()]
    cell, verdicts = [], []
    for name in timed:
        doc = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        seconds = doc["seconds"]
        total = (seconds["train"] + seconds["evaluate"]) / 60
        amx = doc["after"].get("bf16", True)
        precision = "bf16 autocast, a CPU with AMX" if amx else "fp32, a CPU without AMX"
        training = f"training {seconds['train'] / 60:.1f}, evaluation {seconds['evaluate'] / 60:.1f}"
        cell.append(f"{total:.1f} min ({precision}): {training} (`{name}`)")
        host = "a CPU with AMX" if amx else "a CPU without AMX"
        verdicts.append(f"**{'met' if total <= 20 else 'not met'}** on {host} ({total:.1f} min)")
        assert f"`{name}`): {total:.1f} min, " in text
    assert cells[9] == ("; ".join(cell) if cell else "—")
    for verdict in verdicts:
        assert verdict in text


def test_every_number_of_the_main_job_before_issue_42_recomputes() -> None:
    rows = table(PAGE.read_text(encoding="utf-8"), "### Before issue 42")
    assert [cells[0] for cells in rows] == ["`csts/minilm-bi-mse-tuned.yaml`", "`csts/minilm-bi-mse.yaml`"]
    for cells in rows:
        names = re.findall(r"`([^`]+\.json)`", cells[-1])
        results = sorted(
            (json.loads((RESULTS / n).read_text(encoding="utf-8")) for n in names),
            key=lambda d: (d["settings"]["seed"] != 42, d["settings"]["seed"]),
        )
        values = [d["runs"]["bi-mse"]["validation_spearman"] for d in results]
        assert cells[4] == ", ".join(str(d["settings"]["seed"]) for d in results)
        assert cells[5] == f"**{mean_sd(values)}**"
        assert cells[6] == ", ".join(f"{v:.2f}" for v in values)
        epochs = [e["spearman"] for e in results[0]["runs"]["bi-mse"]["evaluations"]]
        assert cells[7] == ", ".join(f"{v:.2f}" for v in epochs)
    # the old recipe's seed-42 number is the one the constraint of issue 39 kept to the digit
    assert rows[0][6].startswith("68.45")


def _chose_and_reported(result: dict) -> tuple[float | None, float]:
    """The score that chose (C-STS: the dev split only; STS: STS-B dev, a two-stage run's last stage) and the reported
    one, read straight from a claims results file."""
    train = result["train"][-1] if isinstance(result["train"], list) else result["train"]
    if "CSTS-validation" in result["report"].get("scores", {}):
        return (train.get("dev") or {}).get("spearman"), result["report"]["scores"]["CSTS-validation"]
    return train["validation"]["spearman"], result["report"]["averages"]["sts"]


def test_every_lever_row_recomputes_from_its_files() -> None:
    """Issue 42's table: the lever side's dev and reported means come from the files the row names, the Δ is the
    difference of the two sides as printed, and "dev favours" follows the sign."""
    rows = table(PAGE.read_text(encoding="utf-8"), "## Levers tried for the best models")
    assert len(rows) >= 18
    for cells in rows:
        names = re.findall(r"`([^`]+\.json)`", cells[-1])
        if names == ["soup_minilm-lr1e-4.json"]:
            soup = json.loads((RESULTS / names[0]).read_text(encoding="utf-8"))
            best = max(soup["members"], key=lambda m: m["dev"])
            assert cells[3].startswith(f"{soup['soup']['dev']:.2f} vs {best['dev']:.2f}")
            assert cells[4].startswith(f"{soup['soup']['validation']:.2f} vs {best['validation']:.2f}")
            continue
        if names == ["sts_finetune_full.json"]:  # one seed, the last step kept: no dev
            finetune = json.loads((RESULTS / names[0]).read_text(encoding="utf-8"))["results"]
            cosent, mse = finetune["cosent"]["eval"]["average"], finetune["mse-cosine"]["eval"]["average"]
            assert cells[3] == "—" and cells[5] == "— (no dev)"
            assert cells[4] == f"{cosent:.2f} vs {mse:.2f} ({cosent - mse:+.2f})"
            continue
        if names == ["condition_template_minilm.json"]:  # its own arms, on their common seeds
            screen = json.loads((RESULTS / names[0]).read_text(encoding="utf-8"))
            common = [s for s in screen["seeds"] if all(str(s) in screen["runs"][arm] for arm in ("lever", "control"))]
            assert cells[2] == ", ".join(map(str, common))
            for cell, key in ((cells[3], "dev_spearman"), (cells[4], "validation_spearman")):
                lever, control = ([screen["runs"][arm][str(s)][key] for s in common] for arm in ("lever", "control"))
                assert cell.startswith(f"{mean_sd(lever)} vs {mean_sd(control)}")
            continue
        results = [json.loads((RESULTS / n).read_text(encoding="utf-8")) for n in names]
        assert cells[2] == ", ".join(str(r["seed"]) for r in results)
        chose = [c for r in results if (c := _chose_and_reported(r)[0]) is not None]
        values = [_chose_and_reported(r)[1] for r in results]
        assert cells[4].startswith(mean_sd(values) + " vs ")
        if not chose:
            assert cells[3] == "—" and cells[5] == "— (no dev)"
            continue
        assert cells[3].startswith(mean_sd(chose) + " vs ")
        lever, base = (float(x) for x in re.findall(r"(\d+\.\d+)(?: ± \d+\.\d+)?", cells[3])[:2])
        delta = float(re.search(r"\(([-+]\d+\.\d+)\)", cells[3]).group(1))
        assert abs(delta - (lever - base)) <= 0.011
        # the page compares unrounded means: a Δ that prints as ±0.00 may favour either side
        assert cells[5] == ("the lever" if delta > 0 else "the baseline") or delta == 0.0


def test_the_headline_rule(page_script: ModuleType, tmp_path: Path) -> None:
    """A headline waits for a challenger whose seed 42 beats the leader's dev, drops one that does not, leaves out
    CASE runs and runs without a score that chooses, and picks the highest 3-seed mean once every challenger has its
    seeds."""
    folder = tmp_path / "results"
    sts = json.loads((RESULTS / "claims" / "best-sts" / "mpnet-mse-cosine__seed42.json").read_text("utf-8"))
    csts = json.loads((RESULTS / "claims" / "best-csts" / "mpnet-bi-mse__seed42.json").read_text("utf-8"))

    def write(template: dict, run: str, seed: int, dev: float | None) -> None:
        study, name = run.split("/")
        result = json.loads(json.dumps(template))
        result.update(study=study, run=name, seed=seed)
        key = "validation" if template is sts else "dev"
        result["train"][key] = None if dev is None else {"spearman": dev}
        (folder / "claims" / study).mkdir(parents=True, exist_ok=True)
        (folder / "claims" / study / f"{name}__seed{seed}.json").write_text(json.dumps(result), encoding="utf-8")

    leader, challenger, loser = "best-sts/mpnet-a", "pcc-mpnet/mpnet-b", "sts-regression-mpnet/mpnet-c"
    for seed, dev in ((42, 89.0), (1, 89.2), (2, 89.4)):
        write(sts, leader, seed, dev)
    write(sts, challenger, 42, 89.5)
    write(sts, loser, 42, 88.0)
    write(csts, "case/mpnet-d", 42, 99.0)  # CASE: its own dev carve, never a candidate
    write(csts, "csts-mpnet/mpnet-e", 42, None)  # no dev split: nothing to choose on
    write(csts, "ccl-mpnet/mpnet-f", 42, 99.0)  # a C-STS run is no STS candidate
    assert page_script.headline_candidates(folder, "sts") == [leader, challenger, loser]
    assert page_script.headline_candidates(folder, "csts") == ["ccl-mpnet/mpnet-f"]
    choice = page_script.headline_choice(folder, "sts", leader)
    assert choice["chosen"] is None
    assert choice["pending"] == [challenger] and choice["dropped"] == [loser]
    write(sts, challenger, 1, 89.0)
    write(sts, challenger, 2, 89.0)  # mean 89.17 < the leader's 89.2
    assert page_script.headline_choice(folder, "sts", leader)["chosen"] == leader
    write(sts, challenger, 2, 89.2)  # mean 89.23 > 89.2
    assert page_script.headline_choice(folder, "sts", leader)["chosen"] == challenger


def test_the_chosen_headline_leads_the_best_models_table(page_script: ModuleType, tmp_path: Path) -> None:
    """Once the rule chooses a challenger from another study, the best-models table shows it first for its task, by
    the recipe file it is shipped as, and README's headline numbers are its own."""
    folder = tmp_path / "results"
    for study in ("best-csts", "ccl-mpnet"):
        (folder / "claims" / study).mkdir(parents=True)
    template = json.loads((RESULTS / "claims" / "best-csts" / "mpnet-bi-mse__seed42.json").read_text("utf-8"))
    for run, devs, reports in (
        ("best-csts/mpnet-bi-mse", (73.0, 73.2, 73.4), (73.5, 73.6, 73.7)),
        ("ccl-mpnet/mpnet-mse", (74.0, 74.2, 74.4), (74.1, 74.3, 74.5)),
    ):
        study, name = run.split("/")
        for seed, dev, value in zip((42, 1, 2), devs, reports):
            result = json.loads(json.dumps(template))
            result.update(study=study, run=name, seed=seed)
            result["train"]["dev"] = {"spearman": dev}
            result["report"]["scores"]["CSTS-validation"] = value
            (folder / "claims" / study / f"{name}__seed{seed}.json").write_text(json.dumps(result), encoding="utf-8")
    assert page_script.headline_runs(folder)["csts"] == "ccl-mpnet/mpnet-mse"
    rows = page_script.best_rows(folder)
    assert [r["run"] for r in rows] == ["ccl-mpnet/mpnet-mse", "best-csts/mpnet-bi-mse"]
    assert rows[0]["recipe"] == "`csts/mpnet-bi-mse-accum4.yaml` (the claims run `ccl-mpnet/mpnet-mse`)"
    assert rows[0]["goal"] == 77.0 and rows[0]["values"] == [74.1, 74.3, 74.5]
    assert page_script.headline(folder)["ccl-mpnet/mpnet-mse"] == "74.30 ± 0.20"
    assert page_script.headline_recipe(folder, "ccl-mpnet/mpnet-mse") == "csts/mpnet-bi-mse-accum4.yaml"
    assert page_script.headline_recipe(folder, "best-csts/mpnet-bi-mse") == "csts/mpnet-bi-mse.yaml"


def test_a_chosen_run_not_shipped_as_a_recipe_stops_the_page(page_script: ModuleType, tmp_path: Path) -> None:
    """A two-stage challenger (pcc-mpnet: train is a list of stages) chosen by the rule failed in best_rows with an
    AttributeError, and README would have been asked to quote its stage-1 recipe: the page says to ship it first."""
    folder = tmp_path / "results"
    template = json.loads((RESULTS / "claims" / "best-sts" / "mpnet-mse-cosine__seed42.json").read_text("utf-8"))
    for run, devs in (("best-sts/mpnet-mse-cosine", (89.0, 89.0, 89.0)), ("pcc-mpnet/mpnet-two", (90.0, 90.0, 90.0))):
        study, name = run.split("/")
        (folder / "claims" / study).mkdir(parents=True, exist_ok=True)
        for seed, dev in zip((42, 1, 2), devs):
            result = json.loads(json.dumps(template))
            result.update(study=study, run=name, seed=seed)
            stage = {**result["train"], "validation": {"spearman": dev}}
            result["train"] = [{**stage, "validation": None}, stage] if study == "pcc-mpnet" else stage
            (folder / "claims" / study / f"{name}__seed{seed}.json").write_text(json.dumps(result), encoding="utf-8")
    assert page_script.headline_runs(folder)["sts"] == "pcc-mpnet/mpnet-two"
    for call in (page_script.best_rows, page_script.headline):
        with pytest.raises(ValueError, match=r"chose pcc-mpnet/mpnet-two, .*ship it as a recipe file .* SHIPPED"):
            call(folder)


def test_the_committed_page_states_each_headline(page_script: ModuleType) -> None:
    text = PAGE.read_text(encoding="utf-8")
    for task, metric, leader in page_script.HEADLINES:
        choice = page_script.headline_choice(RESULTS, metric, leader)
        line = next(line for line in text.splitlines() if line.startswith(f"- {task}: 3-seed dev"))
        if choice["pending"]:
            assert "waiting for seeds 1 and 2" in line and all(f"`{run}`" in line for run in choice["pending"])
            for run in choice["pending"]:  # a seed that has landed is shown with its dev score
                for seed in (1, 2):
                    if seed in choice["dev"][run]:
                        assert f"seed {seed}: {choice['dev'][run][seed]:.2f}" in line
        else:
            assert f"Chosen: `{choice['chosen']}`" in line and line.endswith("(README quotes it).")


def test_the_correctness_bar_recomputes() -> None:
    rows = table(PAGE.read_text(encoding="utf-8"), "## The evaluation harness")
    tasks = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICK-R")
    mini = json.loads((RESULTS / "evaluate_minilm.json").read_text(encoding="utf-8"))
    mpnet = json.loads((RESULTS / "evaluate_mpnet.json").read_text(encoding="utf-8"))
    expected = {
        "all-MiniLM-L6-v2": [mini["tasks"][t]["finesim"]["spearman"] for t in tasks],
        "all-mpnet-base-v2": [mpnet["results"][t]["spearman"] for t in tasks],
    }
    for cells in rows:
        scores = expected[cells[0]]
        assert cells[1:8] == [f"{v:.2f}" for v in scores]
        assert cells[8] == f"{statistics.mean(scores):.2f}"


def _copy_results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    for name in ("evaluate_minilm.json", "evaluate_mpnet.json", "refactor_main_job_after.json"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(RESULTS / name, folder / name)
    for path in RESULTS.glob("csts_train_3ep*.json"):
        shutil.copy(path, folder / path.name)
    shutil.copytree(
        RESULTS / "claims",
        folder / "claims",
        ignore=shutil.ignore_patterns(
            "levers-csts-minilm", "levers2-csts-minilm", "levers3-csts-minilm-gpu", "levers3b-csts-minilm-gpu"
        ),
    )
    return folder


def test_the_levers_study_may_be_absent_or_partial(page_script: ModuleType, tmp_path: Path) -> None:
    folder = _copy_results(tmp_path)
    absent = "\n".join(page_script.levers_section(folder))
    assert "No run has finished yet" in absent
    planned = page_script.planned_levers()
    first = planned[0]
    result = json.loads((RESULTS / "claims" / "best-csts" / "mpnet-bi-mse__seed42.json").read_text(encoding="utf-8"))
    result.update(study="levers-csts-minilm", run=first["id"], seed=42, spec=first)
    (folder / "claims" / "levers-csts-minilm").mkdir()
    (folder / "claims" / "levers-csts-minilm" / f"{first['id']}__seed42.json").write_text(
        json.dumps(result), encoding="utf-8"
    )
    partial = page_script.levers_section(folder)
    row = next(line for line in partial if line.startswith(f"| `{first['id']}`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == f"1 of {len(first['seeds'])} (42)"
    assert cells[3] == f"{result['train']['dev']['spearman']:.2f}"
    assert cells[4] == f"{result['report']['scores']['CSTS-validation']:.2f}"
    assert f"1 of {len(planned)} learning rates done" in "\n".join(partial)
    # the whole page still builds with the study partial
    assert "levers-csts-minilm" in page_script.build(folder, None)


def test_the_readme_is_a_front_door(page_script: ModuleType) -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text) <= 10_000, f"README.md has {len(text)} characters; keep it under 10,000"
    first_screen = text[: text.index("## Install")]
    for command in ("bash scripts/setup.sh", "bash scripts/main.sh", "bash scripts/test.sh"):
        assert command in first_screen
    # the headline numbers are the generated page's
    headline = page_script.headline(RESULTS)
    rows = table(text, "## Results")
    quoted = {cells[2].strip("`"): re.search(r"\[([^\]]+)\]", cells[3]).group(1) for cells in rows}
    for run in page_script.headline_runs(RESULTS).values():  # the runs issue 42's rule chose, by their recipe files
        assert quoted[page_script.headline_recipe(RESULTS, run)] == headline[run], run
    assert quoted["csts/minilm-bi-mse-tuned.yaml"] == headline["csts/minilm-bi-mse-tuned.yaml"]
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO / link).is_file(), f"README links to a missing {link}"


def test_the_soup_line_recomputes(page_script: ModuleType) -> None:
    path = RESULTS / page_script.SOUP
    if not path.is_file():
        pytest.skip(f"{page_script.SOUP} not committed yet")
    d = json.loads(path.read_text(encoding="utf-8"))
    text = PAGE.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("**Model soup**"))
    best = max(m["dev"] for m in d["members"])
    assert f"scores {d['soup']['dev']:.2f} on dev against the best seed's {best:.2f}" in line
    assert ("it beats its best member" in line) == (d["soup"]["dev"] > best) == d["soup_wins_on_dev"]
    assert f"validation {d['soup']['validation']:.2f}" in line


def test_the_condition_template_section_recomputes_and_applies_the_rule(
    page_script: ModuleType, tmp_path: Path
) -> None:
    """The template screen's table and verdict from a hand-written results file: means over the seeds, per seed in
    seed order, the verdict only once both arms have every seed, decided by dev alone (validation favours the other
    way here)."""

    def run(dev: float, val: float) -> dict:
        return {"dev_spearman": dev, "validation_spearman": val, "train_runtime_seconds": 600.0}

    record = {
        "template": "In terms of {condition}: {sentence}",
        "seeds": [42, 1, 2],
        "runs": {"control": {"42": run(71.0, 68.0), "1": run(72.0, 69.0)}, "lever": {"42": run(71.5, 67.0)}},
    }
    path = tmp_path / page_script.TEMPLATE
    path.write_text(json.dumps(record), encoding="utf-8")
    text = "\n".join(page_script.template_lines(tmp_path))
    assert (
        "| control | `(sentence, condition)`, a text pair | 2 of 3 | 71.50 ± 0.71 | 68.50 ± 0.71 | "
        "42: 71.00 / 68.00, 1: 72.00 / 69.00 | 10 min |" in text
    )
    assert (
        "| lever | `In terms of {condition}: {sentence}` | 1 of 3 | 71.50 | 67.00 | 42: 71.50 / 67.00 | 10 min |"
        in text
    )
    assert "no verdict yet" in text
    record["runs"]["control"]["2"] = run(70.0, 67.0)  # control mean dev 71.00
    record["runs"]["lever"].update({"1": run(72.0, 60.0), "2": run(70.8, 60.0)})  # lever mean dev 71.43: +0.43
    path.write_text(json.dumps(record), encoding="utf-8")
    assert "Mean dev gain of the lever: +0.43: it passes." in page_script.template_lines(tmp_path)
    record["runs"]["lever"]["2"] = run(70.6, 90.0)  # lever mean dev 71.37: +0.37, whatever validation says
    path.write_text(json.dumps(record), encoding="utf-8")
    assert "Mean dev gain of the lever: +0.37: it does not pass." in page_script.template_lines(tmp_path)
    assert page_script.template_lines(tmp_path / "absent") == []
    # a run of seed 42 alone (a smoke run) is judged by nothing: the rule's seeds are 42, 1 and 2
    smoke = {**record, "seeds": [42], "rule_seeds": [42, 1, 2], "pass_margin": 0.4}
    smoke["runs"] = {"control": {"42": run(16.0, 11.0)}, "lever": {"42": run(17.0, 12.0)}}
    path.write_text(json.dumps(smoke), encoding="utf-8")
    lines = page_script.template_lines(tmp_path)
    assert "Not every seed of both arms has run: no verdict yet." in lines
    assert any(line.startswith("| lever | ") and "| 1 of 3 |" in line for line in lines)


def _write_lever(
    study: Path,
    template: dict,
    run: str,
    dev: float | None,
    seed: int,
    spec: dict,
    *,
    validation: float | None = None,
    gpu: str | None = None,
) -> None:
    """A lever screen's results file from ``template``: its dev Spearman (none when None), a train.validation of 99.0
    that the rule must never use, and optionally the reported validation and the GPU the run names."""
    result = json.loads(json.dumps(template))
    result.update(study=study.name, run=run, seed=seed, spec=spec)
    result["train"]["validation"] = {"spearman": 99.0}
    result["train"].pop("dev", None)
    if dev is not None:
        result["train"]["dev"] = {"spearman": dev}
    if validation is not None:
        result["report"]["scores"]["CSTS-validation"] = validation
    if gpu is not None:
        result["environment"]["hardware"]["gpu"] = gpu
    (study / f"{run}__seed{seed}.json").write_text(json.dumps(result), encoding="utf-8")


def test_the_second_lever_screen_applies_the_plans_rule(page_script: ModuleType, tmp_path: Path) -> None:
    """plan.yaml's rule by hand: the control counts within 0.80 of the bf16 run's seed 42, a lever passes on seed 42
    by more than 0.40 (unrounded), and ships on the mean of seeds 1 and 2 by more than 0.40; dev is train.dev only."""
    folder = _copy_results(tmp_path)
    study = page_script.LEVERS2
    planned = {spec["id"]: spec for spec in page_script.planned_levers(study)}
    control, llrd, batch = "minilm-fp32-control", "minilm-llrd0.95", "minilm-batch64"
    control_b, aux_run, soup_run = "minilm-fp32-control-b", "minilm-aux-sts", "minilm-soup3"
    assert set(planned) == {control, llrd, batch, control_b, aux_run, soup_run, "minilm-freeze-words"}
    assert planned[aux_run]["control"] == control_b and planned[control_b]["set"] == planned[control]["set"]
    assert planned[soup_run]["control"] == planned["minilm-freeze-words"]["control"] == control_b
    for spec in planned.values():  # the main job's settings written out, so a recipe change cannot move them
        assert {"train.bf16=false", "data.dev_fraction=0.1", "data.dev_seed=42", "train.epochs=4"} <= set(spec["set"])

    def rows() -> dict[str, list[str]]:
        lines = page_script.levers2_lines(folder)
        return {
            cells[0].strip("`"): cells
            for line in lines
            if line.startswith("| `")
            for cells in [[c.strip() for c in line.strip().strip("|").split("|")]]
        }

    def text() -> str:
        return "\n".join(page_script.levers2_lines(folder))

    before = rows()
    assert before[control][7] == "control" and before[llrd][7] == "to run" and before[llrd][3] == "0 of 1"
    assert before[batch][1] == "`train.learning_rate=1.4e-4`, `train.batch_size=64`"
    assert before[llrd][1] == "`train.layer_lr_decay=0.95`"
    aux = "`data.auxiliary=[{format: sts, train: '.', condition: overall meaning, low: 0, high: 5}]`"
    assert before[aux_run][1] == aux and before[aux_run][7] == "to run"
    assert before[aux_run][2] == f"`{control_b}`" and before[llrd][2] == f"`{control}`"
    assert before[control_b][7] == "control" and before[control_b][1] == "— (the control)"
    assert "The control has not run yet." in text() and f"The control `{control_b}` has not run yet." in text()
    lever_file = RESULTS / "claims" / "levers-csts-minilm" / "minilm-lr1e-4__seed42.json"
    template = json.loads(lever_file.read_text(encoding="utf-8"))
    for name in ("levers-csts-minilm", study):
        (folder / "claims" / name).mkdir(exist_ok=True)

    def write(run: str, dev: float | None, seed: int = 42, at: str = study, validation: float = 60.0) -> None:
        _write_lever(folder / "claims" / at, template, run, dev, seed, planned.get(run, {}), validation=validation)

    write(llrd, 72.00)
    write(control, 71.50)
    assert "is missing: the control cannot be checked" in text() and rows()[llrd][7] == "no verdict (control)"
    write("minilm-lr1e-4", 72.31, at="levers-csts-minilm")  # 0.81 away: the control does not count
    assert "it does not count: the screen stops" in text() and rows()[llrd][7] == "no verdict (control)"
    write("minilm-lr1e-4", 71.78, at="levers-csts-minilm")
    assert "Control seed 42: dev 71.50 against the bf16 run's 71.78: it counts." in text()
    write(batch, 71.8951)  # +0.395: does not pass; llrd +0.500 passes
    after = rows()
    assert after[llrd][7] == "+0.500: passes" and after[llrd][4] == "72.00" and after[llrd][3] == "1 of 1 (42)"
    assert after[batch][7] == "+0.395: does not pass" and after[batch][8] == "—"
    write(batch, 71.9049)  # +0.405 unrounded is more than 0.40
    assert rows()[batch][7] == "+0.405: passes"
    write(batch, None)  # no dev: the validation figure (99.0 in train.validation) is never used
    assert rows()[batch][7] == "to run"
    # the ship decision: seeds 1 and 2 of both, seed 42 not reused
    write(llrd, 71.0, seed=1)
    write(llrd, 72.0, seed=2)
    write(control, 71.0, seed=1)
    assert rows()[llrd][8] == "—"  # the control's seed 2 is missing
    write(control, 71.3, seed=2)  # lever 71.5, control 71.15: +0.350 does not ship
    assert rows()[llrd][8] == "+0.350: does not ship"
    write(control, 71.0, seed=2)  # +0.500 ships
    assert rows()[llrd][8] == "+0.500: ships"
    # a lever with its own control (rerun on the lever's host) is screened against that control alone
    write(aux_run, 72.30)
    assert rows()[aux_run][7] == "no verdict (control)"  # control-b has not run
    write(control_b, 71.70)
    assert f"Control `{control_b}` seed 42: dev 71.70 against the bf16 run's 71.78: it counts." in text()
    assert rows()[aux_run][7] == "+0.600: passes"  # against control-b's 71.70, not the first control's 71.50
    write(control_b, 72.70)  # 0.92 from the bf16 run: control-b does not count, whatever the first control does
    assert rows()[aux_run][7] == "no verdict (control)" and rows()[llrd][7] == "+0.500: passes"
    # a checkpoint soup is screened by the soup's own dev, which can lose; its kept model's dev cannot
    write(control_b, 71.70)
    write(soup_run, 71.70)  # kept: the best epoch, whose dev equals control-b's
    soup_file = folder / "claims" / study / f"{soup_run}__seed42.json"
    result = json.loads(soup_file.read_text(encoding="utf-8"))
    result["train"]["soup"] = {
        "members": ["checkpoint-2", "checkpoint-3"],
        "average": {"spearman": 71.40},
        "best": {"spearman": 71.70},
        "chosen": "best",
    }
    soup_file.write_text(json.dumps(result), encoding="utf-8")
    assert rows()[soup_run][7] == "-0.300: does not pass" and rows()[soup_run][4] == "71.40"
    assert (
        f"`{soup_run}` seed 42: the soup of checkpoint-2, checkpoint-3 scores 71.40 on dev against its own best"
        in text()
    )
    assert "(-0.300); kept: the best" in text()
    assert page_script.LEVERS2 in page_script.build(folder, None)


def test_the_gpu_lever_screen_applies_the_plans_rule(page_script: ModuleType, tmp_path: Path) -> None:
    """plan.yaml's third-screen rule by hand: the control counts when its 3-seed mean dev is within 0.80 of the CPU
    main job's seeds' mean, a lever passes when its 3-seed mean dev beats the control's by more than 0.40 (unrounded);
    a lever with no run says so and names itself among those not run; dev is train.dev only."""
    folder = _copy_results(tmp_path)
    study = page_script.LEVERS3
    planned = {spec["id"]: spec for spec in page_script.planned_levers(study)}
    control, lever, other = "minilm-control", "minilm-epochs8", "minilm-cosent"
    assert {control, lever, other} <= set(planned)
    for spec in planned.values():  # one change each against the control's written-out settings, three seeds
        assert {"train.bf16=false", "data.dev_fraction=0.1", "data.dev_seed=42"} <= set(spec["set"])
        assert spec["seeds"] == [42, 1, 2]
        assert len(set(spec["set"]) - set(planned[control]["set"])) <= 2

    def rows() -> dict[str, list[str]]:
        return {
            cells[0].strip("`"): cells
            for line in page_script.levers3_lines(folder)
            if line.startswith("| `")
            for cells in [[c.strip() for c in line.strip().strip("|").split("|")]]
        }

    def text() -> str:
        return "\n".join(page_script.levers3_lines(folder))

    assert rows()[lever][6] == "not run" and rows()[lever][1] == "`train.epochs=8`"
    assert "The control has 0 of 3 seeds" in text() and f"`{lever}`" in text().split("Not run:")[1]
    template = json.loads(
        (RESULTS / "claims" / "levers-csts-minilm" / "minilm-lr1e-4__seed42.json").read_text(encoding="utf-8")
    )
    for name in ("levers-csts-minilm", study):
        (folder / "claims" / name).mkdir(exist_ok=True)

    def write(run: str, dev: float | None, seed: int, at: str = study) -> None:
        _write_lever(folder / "claims" / at, template, run, dev, seed, planned.get(run, {}), gpu="Some GPU")

    for seed, dev in ((42, 72.0), (1, 71.0), (2, 71.5)):  # control mean 71.5
        write(control, dev, seed)
    write(lever, 72.0, 42)
    write(lever, 71.5, 1)
    assert rows()[lever][6] == "incomplete" and rows()[lever][2] == "2 of 3 (42, 1)"
    assert "CPU main job's seeds" in text() and "cannot be checked" in text()
    for seed, dev in ((42, 72.4), (1, 72.4), (2, 72.3)):  # CPU mean 72.3667: 0.8667 away, the control does not count
        write("minilm-lr1e-4", dev, seed, at="levers-csts-minilm")
    write(lever, 72.1999, 2)  # lever mean 71.89997: +0.39997 does not pass (more than 0.40 is needed)
    assert "it does not count: the screen stops" in text() and rows()[lever][6] == "no verdict (control)"
    write("minilm-lr1e-4", 71.9, 2, at="levers-csts-minilm")  # CPU mean 72.2333: 0.7333 away, it counts
    assert "Control: mean dev 71.50 against the CPU main job's 72.23: it counts." in text()
    assert "run on Some GPU" in text()
    assert rows()[lever][6] == "+0.400: does not pass" and rows()[lever][3] == "71.90 ± 0.36"
    write(lever, 72.2001, 2)  # lever mean 71.90003: +0.40003 unrounded is more than 0.40
    assert rows()[lever][6] == "+0.400: passes"
    write(lever, None, 2)  # no dev: the validation figure (99.0 in train.validation) is never used
    assert rows()[lever][6] == "incomplete"
    assert f"`{lever}`" not in text().split("Not run:")[1] and f"`{other}`" in text().split("Not run:")[1]
    assert page_script.LEVERS3 in page_script.build(folder, None)


def test_the_second_gpu_sitting_compares_each_lever_with_its_own_control(
    page_script: ModuleType, tmp_path: Path
) -> None:
    """Study levers3b (the third screen's rows a later GPU ran): the rule against its own call's control, never the
    first sitting's; the page says when the two controls agree at every seed, and the first sitting's "Not run" note
    names the rows that ran later (only those)."""
    folder = _copy_results(tmp_path)
    first, second = page_script.LEVERS3, page_script.LEVERS3B
    planned = {spec["id"]: spec for spec in page_script.planned_levers(second)}
    control, lever = "minilm-control", "minilm-clip1"
    assert set(planned) == {control, lever, "minilm-transform", "minilm-wd0.01"}
    assert planned[control]["set"] == next(
        spec["set"] for spec in page_script.planned_levers(first) if spec["id"] == control
    )
    template = json.loads(
        (RESULTS / "claims" / "levers-csts-minilm" / "minilm-lr1e-4__seed42.json").read_text(encoding="utf-8")
    )
    for name in ("levers-csts-minilm", first, second):
        (folder / "claims" / name).mkdir(exist_ok=True)

    def write(run: str, dev: float, seed: int, at: str) -> None:
        _write_lever(folder / "claims" / at, template, run, dev, seed, planned.get(run, {}), gpu="Some GPU")

    def rows() -> dict[str, list[str]]:
        return {
            cells[0].strip("`"): cells
            for line in page_script.levers3_lines(folder, second)
            if line.startswith("| `")
            for cells in [[c.strip() for c in line.strip().strip("|").split("|")]]
        }

    for seed in (42, 1, 2):
        write("minilm-lr1e-4", 70.5, seed, at="levers-csts-minilm")  # CPU mean 70.5
        write(control, 71.5, seed, at=first)  # the first sitting's control: 71.5
        write(control, 70.0, seed, at=second)  # this call's control: 70.0, 0.5 from the CPU's, it counts
    write(lever, 70.5, 42, at=second)
    write(lever, 70.5, 1, at=second)
    write(lever, 70.2, 2, at=second)  # mean 70.4: +0.400 against its own control does not pass (-1.1 vs the first)
    text = "\n".join(page_script.levers3_lines(folder, second))
    assert "Control: mean dev 70.00 against the CPU main job's 70.50: it counts." in text
    assert "equals the first sitting's" not in text
    assert rows()[lever][6] == "+0.400: does not pass"
    write(lever, 70.21, 2, at=second)  # mean 70.40333: passes against its own control
    assert rows()[lever][6] == "+0.403: passes"
    note = "\n".join(page_script.levers3_lines(folder, first)).split("Not run:")[1]
    assert "`minilm-clip1`: run later, with their own control" in note and "`minilm-wd0.01`: run" not in note
    for seed in (42, 1, 2):
        write(control, 71.5, seed, at=second)
    assert "equals the first sitting's at every seed (3)" in "\n".join(page_script.levers3_lines(folder, second))
    assert second in page_script.build(folder, None)


SERVING = "## Serving throughput (finesim serve, issue 41)"


def _serve_cells_recompute(cells: list[str], path: Path) -> dict:
    """A serving table row against its results file: pairs per request, workers, in-process and server pairs/s, their
    ratio, p95 latency and errors, worked out here from the JSON."""
    d = json.loads(path.read_text(encoding="utf-8"))
    server = d["results"]["server_batched"]
    in_process = d["results"]["in_process"]["pairs_per_s"]
    assert cells[2] == str(d["settings"]["pairs_per_request"]), path.name
    assert cells[3] == str(server.get("workers") or d["settings"].get("workers") or 1), path.name
    assert cells[4] == f"{in_process:.1f}", path.name
    assert cells[5] == f"{server['pairs_per_s']:.1f}", path.name
    assert cells[6] == f"{server['pairs_per_s'] / in_process:.2f}×", path.name
    assert cells[7] == f"{server['latency_ms']['p95']:,.0f}", path.name
    assert cells[8] == str(server["errors"]), path.name
    return d


def test_every_row_of_the_serving_tables_recomputes_from_its_file() -> None:
    """Issue 41's serving section: one row per server run of ``serve_stack/`` (run letter, pairs per request, repeat),
    each figure recomputed from its file, the CPU split where the file records it, and the goal lines' verdicts."""
    text = PAGE.read_text(encoding="utf-8")
    rows = table(text, SERVING)
    folder = RESULTS / "serve_stack"
    runs = [p for p in folder.glob("*.json") if re.fullmatch(r"[A-Z]_ppr\d+_r\d+", p.stem)]
    assert len(runs) >= 20

    def order(stem: str) -> tuple[str, int, int]:
        letter, ppr, repeat = re.fullmatch(r"([A-Z])_ppr(\d+)_r(\d+)", stem).groups()
        return letter, int(ppr), int(repeat)

    stems = [cells[0].strip("`") for cells in rows]
    assert stems == sorted((p.stem for p in runs), key=order)
    ratios: dict[int, dict[str, list[float]]] = {}
    for cells in rows:
        d = _serve_cells_recompute(cells, folder / f"{cells[0].strip('`')}.json")
        server, in_process = d["results"]["server_batched"], d["results"]["in_process"]["pairs_per_s"]
        ppr = d["settings"]["pairs_per_request"]
        ratios.setdefault(ppr, {}).setdefault(cells[0][1], []).append(server["pairs_per_s"] / in_process)
        cpu = server.get("cpu_seconds")
        if cpu:
            total = cpu["machine_total_s"]
            expected = [
                cpu["server_main_threads_s"] / total,
                cpu["server_other_threads_s"] / total,
                cpu["load_generator_s"] / total,
                (total - cpu["machine_busy_s"]) / total,
            ]
            assert cells[10:14] == [f"{100 * v:.1f}" for v in expected], cells[0]
        else:
            assert cells[10:14] == ["", "", "", ""], cells[0]
    section = text[text.index(SERVING) :]
    for ppr in (1, 32):
        best = max(statistics.mean(v) for v in ratios[ppr].values())
        plural = "s" if ppr > 1 else ""
        line = next(x for x in section.splitlines() if x.startswith(f"- ≥ 0.8× in-process at {ppr} pair{plural} "))
        assert line.endswith("**met**." if best >= 0.8 else "**not met**."), line
    # at the time of writing: the goal holds at 32 pairs per request, not at one
    assert max(statistics.mean(v) for v in ratios[1].values()) < 0.8 <= max(map(statistics.mean, ratios[32].values()))
    earlier = table(section, "Earlier runs (")
    assert len(earlier) >= 8
    for cells in earlier:
        _serve_cells_recompute(cells, RESULTS / f"{cells[0].strip('`')}.json")
    # the in-process scorer on chunks: one column per host's file, one row per chunk size, then the one-call run
    files = (
        "in_process_chunks.json",
        "in_process_chunks_L.json",
        "in_process_chunks_L_ibs16.json",
        "in_process_chunks_L_ibs8.json",
    )
    chunks = [json.loads((folder / name).read_text(encoding="utf-8"))["results"] for name in files]
    chunk_rows = table(section, "The in-process scorer on consecutive chunks")
    sizes = sorted({c["chunk_pairs"] for r in chunks for c in r["in_process_chunked"].values()})
    expected_rows = [
        [str(size)]
        + [
            f"{c['calls']} calls, {c['pairs_per_s']:.1f}" if (c := r["in_process_chunked"].get(str(size))) else ""
            for r in chunks
        ]
        for size in sizes
    ]
    expected_rows.append(
        ["all (one call)"]
        + [f"1 call of {r['in_process']['pairs']:,}, {r['in_process']['pairs_per_s']:.1f}" for r in chunks]
    )
    assert chunk_rows == expected_rows
    # the later host's server runs against its chunked scorer at the micro-batch's size (15) and its one call
    later = chunks[1]
    served = [json.loads((folder / f"L_ppr1_r{i}.json").read_text(encoding="utf-8"))["results"] for i in (1, 2)]
    chunked = later["in_process_chunked"]["15"]["pairs_per_s"]
    vs_chunks = sorted(f"{r['server_batched']['pairs_per_s'] / chunked:.2f}" for r in served)
    vs_once = sorted(f"{r['server_batched']['pairs_per_s'] / r['in_process']['pairs_per_s']:.2f}" for r in served)
    line = next(x for x in section.splitlines() if x.startswith("On K and L's host the default server"))
    assert f"{vs_chunks[0]}–{vs_chunks[-1]}× of the in-process scorer called on chunks of 15 pairs" in line
    assert f"against {vs_once[0]}–{vs_once[-1]}× of it called once over all the pairs" in line

    # the model's runtime (I: ONNX fp32 export) against the torch model (H), same rounds: both sides' means and ratios
    def means(stems: tuple[str, ...]) -> tuple[float, float, float]:
        files = [json.loads((folder / f"{s}.json").read_text(encoding="utf-8"))["results"] for s in stems]
        server = statistics.mean(f["server_batched"]["pairs_per_s"] for f in files)
        in_process = statistics.mean(f["in_process"]["pairs_per_s"] for f in files)
        ratio = statistics.mean(f["server_batched"]["pairs_per_s"] / f["in_process"]["pairs_per_s"] for f in files)
        return server, in_process, ratio

    (onnx_server, onnx_in, onnx_ratio), (torch_server, torch_in, torch_ratio) = (
        means(("I_ppr1_r1", "I_ppr1_r2")),
        means(("H_ppr1_r1", "H_ppr1_r2")),
    )
    runtime = next(x for x in section.splitlines() if x.startswith("The model's runtime (I: "))
    assert (
        f"the server answers {onnx_server:.1f} against {torch_server:.1f} pairs/s"
        f" ({onnx_server / torch_server - 1:+.1%}) and the in-process scorer {onnx_in:.1f} against {torch_in:.1f}"
        f" ({onnx_in / torch_in - 1:+.1%}), so the ratio is {onnx_ratio:.2f}× against {torch_ratio:.2f}×."
    ) in runtime


DISTILLED = "## A distilled first stage (issue 41)"
TWO_STAGE = "## Conditional search at scale: two-stage search"


def _section(text: str, heading: str) -> str:
    """From ``heading`` to the next ``## `` heading."""
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def test_every_distillation_row_and_its_goal_recompute_from_the_files() -> None:
    """Issue 41's distillation: one row per non-smoke ``distill/*.json`` (seed 42 first), each figure worked out here
    from its file (gap = teacher - student on validation and on dev, time per step = the student's seconds over its
    steps), and per teacher and recipe the gap goal (<= 2 points, mean over the seeds run) with the seeds counted
    against the 3 planned."""
    section = _section(PAGE.read_text(encoding="utf-8"), DISTILLED)
    rows = table(section, DISTILLED)
    files = {
        p.relative_to(RESULTS).as_posix(): json.loads(p.read_text(encoding="utf-8"))
        for p in sorted((RESULTS / "distill").glob("*.json"))
    }
    files = {name: d for name, d in files.items() if not d.get("smoke")}
    assert files, "no distillation results file"
    assert sorted(cells[0].strip("`") for cells in rows) == sorted(files)
    gaps: dict[tuple[str, str], dict[int, float]] = {}
    for cells in rows:
        d = files[cells[0].strip("`")]
        val, dev = d["validation_spearman"], d["dev_spearman"]
        steps = d["student_training"]["global_steps"]
        triples = d["data"]["triples_report"]["counts"]["total"]
        kept = int(d["student_training"]["best_checkpoint"].rsplit("-", 1)[1])
        assert cells[1] == f"`{d['teacher']['model']}`"
        assert cells[2] == f"`{d['student']['recipe']['name']}`"
        assert cells[3] == str(d["seed"])
        assert cells[4] == f"{triples:,}"
        assert cells[5] == f"{kept:,} of {steps:,}"
        assert cells[6] == f"{d['student_training']['dev_spearman_at_selection']:.2f}"
        assert cells[7] == f"{dev['teacher']:.2f} / {dev['student']:.2f} ({dev['teacher'] - dev['student']:.2f})"
        assert cells[8] == f"{val['teacher']:.2f} / {val['student']:.2f}"
        assert cells[9] == f"**{val['teacher'] - val['student']:.2f}**"
        assert abs((val["teacher"] - val["student"]) - d["gap_validation"]) < 1e-9  # run.py's own figure agrees
        assert cells[10] == f"{d['seconds']['student'] / steps:.2f} s"
        assert cells[11].startswith(f"{d['seconds']['student'] / 60:.0f} min")
        teacher_s = d["seconds"]["teacher-scores"]
        assert cells[12] == f"{teacher_s / 60:.1f} min ({triples / teacher_s:.1f} triples/s)"
        gaps.setdefault((d["teacher"]["model"], d["student"]["recipe"]["name"]), {})[d["seed"]] = (
            val["teacher"] - val["student"]
        )
    for (teacher, recipe), by_seed in gaps.items():
        mean = statistics.mean(by_seed.values())
        planned = len(set(by_seed) & {42, 1, 2})
        line = next(x for x in section.splitlines() if x.startswith("- gap ≤ 2 points") and f"`{recipe}`" in x)
        assert f"from `{teacher}`: {mean:.2f} (mean over {len(by_seed)} seed" in line, line
        assert f"; {planned} of the 3 planned seeds run)" in line, line
        assert line.endswith("**met**." if mean <= 2.0 else "**not met**."), line
    # at the time of writing: one MiniLM seed, the goal not met
    assert any(statistics.mean(v.values()) > 2.0 for v in gaps.values())


def test_the_distilled_first_stage_table_recomputes() -> None:
    """The student as its teacher's first stage: recall@10 against the teacher's exact ranking per first-stage search
    and N from ``two_stage_search_distilled.json``, the teacher's own ``conditioned`` rows from
    ``two_stage_search.json``, and the count of points where the student is below."""
    section = _section(PAGE.read_text(encoding="utf-8"), DISTILLED)
    student = json.loads((RESULTS / "two_stage_search_distilled.json").read_text(encoding="utf-8"))
    teacher = json.loads((RESULTS / "two_stage_search.json").read_text(encoding="utf-8"))
    rows = table(section, "As the first stage of its teacher's two-stage search")
    names = {"exact": "exact first stage", "hnsw": "HNSW first stage"}
    expected_rows = []
    mine = {
        (r["first_stage_search"], r["candidates"]): r["recall_at_10_vs_reference"] for r in student["results"]["recall"]
    }
    own = {
        (r["first_stage_search"], r["candidates"]): r["recall_at_10"]
        for r in teacher["results"]["recall"]
        if r["query_mode"] == "conditioned"
    }
    ns = sorted({n for _, n in mine})
    for label, points in (("distilled student (`tri`)", mine), ("the teacher's own (`conditioned`)", own)):
        for search in ("exact", "hnsw"):
            expected_rows.append([f"{label}, {names[search]}"] + [f"{points[(search, n)]:.3f}" for n in ns])
    assert rows == expected_rows
    below = sum(mine[k] < own[k] for k in mine)
    sentence = f"lower recall@10 than the teacher's own first stage at {below} of {len(mine)} points"
    assert sentence in section


def test_the_two_stage_goal_lines_recompute() -> None:
    """Issue 41's goals for two-stage search, worked out here from the files: a never-seen condition over 1M texts at
    p50 <= 500 ms and p95 <= 1 s (cold cache; per first stage, met up to the largest N below which every N is
    within), recall@10 >= 0.90 against the exact fp32 ranking at 50k texts (per first stage, from the smallest N
    after which every N reaches it; the int8 export's best against fp32), and both at once (the int8 recall at 50k
    standing in at the points within the latency bounds)."""
    section = _section(PAGE.read_text(encoding="utf-8"), TWO_STAGE)
    goals = {cells[0]: cells for cells in table(section, "Goals of issue 41")}
    load = lambda name: json.loads((RESULTS / name).read_text(encoding="utf-8"))  # noqa: E731
    latency = {
        (r["first_stage_search"], r["candidates"]): (1000 * r["cold"]["p50_seconds"], 1000 * r["cold"]["p95_seconds"])
        for r in load("two_stage_latency_1m.json")["results"]["latency"]
    }
    within = {k for k, (p50, p95) in latency.items() if p50 <= 500 and p95 <= 1000}
    (lat_goal,) = [c for g, c in goals.items() if g.startswith("a never-seen condition over 1,000,000 texts")]
    names = {"exact": "exact first stage", "hnsw": "HNSW first stage"}
    for search in ("exact", "hnsw"):
        ns = sorted(n for s, n in latency if s == search)
        upto = None
        for n in ns:
            if (search, n) not in within:
                break
            upto = n
        if upto is not None:
            assert f"N ≤ {upto} ({names[search]})" in lat_goal[2]
    assert lat_goal[2].startswith("**met**") == bool(within)
    fp32 = {
        (r["first_stage_search"], r["candidates"]): r["recall_at_10"]
        for r in load("two_stage_search.json")["results"]["recall"]
        if r["query_mode"] == "conditioned"
    }
    int8_rows = [r for r in load("two_stage_search_int8.json")["results"]["recall"] if r["query_mode"] == "conditioned"]
    int8 = {(r["first_stage_search"], r["candidates"]): r["recall_at_10_vs_reference"] for r in int8_rows}
    (recall_goal,) = [c for g, c in goals.items() if g.startswith("recall@10 ≥ 0.90")]
    for search in ("exact", "hnsw"):
        ns = sorted(n for s, n in fp32 if s == search)
        reach = [n for i, n in enumerate(ns) if all(fp32[(search, m)] >= 0.90 for m in ns[i:])]
        if reach:
            assert f"from N = {reach[0]} ({names[search]})" in recall_goal[2]
            assert f"{fp32[(search, reach[0])]:.3f} at N = {reach[0]}" in recall_goal[1]
    assert f"at most {max(int8.values()):.3f}" in recall_goal[1]
    assert recall_goal[2].endswith("int8: **met**" if max(int8.values()) >= 0.90 else "int8: **not met**")
    (both,) = [c for g, c in goals.items() if g.startswith("both at once")]
    shown = [int8[k] for k in sorted(within) if k in int8]
    for k in sorted(within):
        assert f"{names[k[0]]} N = {k[1]}: {int8[k]:.3f} against fp32" in both[1]
    assert both[2] == ("**met**" if shown and max(shown) >= 0.90 else "**not met**")
    # at the time of writing: latency met at small N, recall by fp32 at larger N, never both at once with int8
    assert within and max(fp32.values()) >= 0.90 and max(shown) < 0.90


def test_the_small_corpus_search_tables_recompute() -> None:
    """``conditional_retrieval.json`` and ``index_scaling.json`` rows: preferences, recall@10 by label band, and each
    index size's build, latency (ms), faiss recall and disk figures."""
    text = PAGE.read_text(encoding="utf-8")
    retrieval = json.loads((RESULTS / "conditional_retrieval.json").read_text(encoding="utf-8"))
    rows = table(text, "### Conditioning changes what is found")
    assert len(rows) == len(retrieval["results"])
    for cells, r in zip(rows, retrieval["results"], strict=True):
        rec = r["recall"]
        assert cells[0] == f"`{r['name']}` (`{r['model']}`)"
        assert cells[2:6] == [
            f"{r['rank_preference']:.2f}",
            f"{r['score_preference']:.2f}",
            str(r["preference_comparisons"]),
            f"{rec['all']['recall_at_10']:.2f}",
        ]
        assert cells[6:8] == [f"{rec['label_4_5']['recall_at_10']:.2f}", f"{rec['label_1_2']['recall_at_10']:.2f}"]
    scaling = json.loads((RESULTS / "index_scaling.json").read_text(encoding="utf-8"))
    rows = table(text, "### Index build time, latency, memory")
    expected = []
    for key in sorted(scaling["results"], key=int):
        size = scaling["results"][key]
        for head, t in size.get("tri", {}).items():
            ann = t["approximate"]
            expected.append(
                [
                    f"{size['size']:,}",
                    f"tri, {head}",
                    f"{t['build_seconds']:.1f} s ({t['build_texts_per_second']:.0f} texts/s)",
                    f"{1000 * t['exact']['p50_seconds']:.0f} / {1000 * t['exact']['p95_seconds']:.0f}",
                    f"{1000 * ann['hnsw']['p50_seconds']:.0f} / {ann['hnsw']['recall_at_10']:.3f}",
                    f"{1000 * ann['ivf']['p50_seconds']:.0f} / {ann['ivf']['recall_at_10']:.3f}",
                    f"{t['index_bytes'] / 1e6:.0f} MB",
                ]
            )
        if "bi" in size:
            bi = size["bi"]
            expected.append(
                [f"{size['size']:,}", "bi", None, f"warm {1000 * bi['warm']['p50_seconds']:.0f} / "
                 f"{1000 * bi['warm']['p95_seconds']:.0f}", None, None,
                 f"+ {bi['condition_bytes_each'] / 1e6:.0f} MB per condition"]
            )  # fmt: skip
    assert len(rows) == len(expected)
    for cells, want in zip(rows, expected, strict=True):
        assert [c for c, w in zip(cells, want) if w is not None] == [w for w in want if w is not None]


HNSW_EF = "### The HNSW first stage: efSearch widened with N"


def test_the_hnsw_ef_table_recomputes() -> None:
    """The widened-efSearch run (``two_stage_search_hnsw_ef.json``): per N, recall@10 of each first-stage search the
    run measured (exact, HNSW as finesim searches it now, HNSW with the fixed ef_search of before), each HNSW
    search's share of the exact first stage's candidates, and cold p50 / p95 ms, worked out here from the file."""
    data = json.loads((RESULTS / "two_stage_search_hnsw_ef.json").read_text(encoding="utf-8"))
    searches = list(dict.fromkeys(r["first_stage_search"] for r in data["results"]["recall"]))
    assert searches == ["exact", "hnsw", "hnsw@0"]
    recall = {
        (r["first_stage_search"], r["candidates"]): r["recall_at_10"]
        for r in data["results"]["recall"]
        if r["query_mode"] == "conditioned"
    }
    latency = {
        (r["first_stage_search"], r["candidates"]): f"{1000 * r['cold']['p50_seconds']:,.0f} / "
        f"{1000 * r['cold']['p95_seconds']:,.0f}"
        for r in data["results"]["latency"]
    }
    coverage = {
        (r["first_stage_search"], r["candidates"]): r["first_stage_coverage"]
        for r in data["results"]["recall"]
        if "first_stage_coverage" in r
    }
    ns = sorted({n for _, n in recall})
    expected = [
        [
            str(n),
            *(f"{recall[(s, n)]:.3f}" for s in searches),
            *(f"{coverage[(s, n)]:.3f}" for s in searches[1:]),
            *(latency.get((s, n), "") for s in searches),
        ]
        for n in ns
    ]
    assert table(PAGE.read_text(encoding="utf-8"), HNSW_EF) == expected
    # what docs/search.md says of this run: wherever 4 N exceeds 128 (N > 32), the fixed ef_search returns fewer of
    # the exact first stage's candidates than the widened one, and the two-stage recall@10 is no higher
    assert all(coverage[("hnsw", n)] > coverage[("hnsw@0", n)] for n in ns if n > 32)
    assert all(recall[("hnsw", n)] >= recall[("hnsw@0", n)] for n in ns)
    assert max(recall[("exact", n)] - recall[("hnsw", n)] for n in ns) <= 0.022  # docs/search.md: "at most 0.022 below"


RERANK = "### The re-ranking stage on each fast path"


def test_the_rerank_paths_table_recomputes() -> None:
    """``rerank_paths.json``: per N and path, p50 / p95 ms, agreement@10 (recomputed from every query's agreement)
    with its lowest value and the p50 speed-up over fp32 torch, worked out here from the file; and the figures
    docs/search.md and docs/fast-inference.md quote from it."""
    data = json.loads((RESULTS / "rerank_paths.json").read_text(encoding="utf-8"))
    paths = data["results"]["paths"]
    reference = data["settings"]["reference"]
    assert next(iter(paths)) == reference
    expected = []
    at: dict[tuple[str, int], dict] = {}
    for n in data["settings"]["candidates"]:
        point = {name: next(p for p in paths[name]["points"] if p["candidates"] == n) for name in paths}
        base = point[reference]["seconds"]["p50_seconds"]
        cells = [str(n)]
        for name in paths:
            p = point[name]
            agree = p["per_query"]["agreement_at_10"]
            assert len(agree) == len(p["per_query"]["seconds"]) == 24
            assert p["agreement_at_10"] == pytest.approx(statistics.mean(agree), abs=5e-5)
            assert p["min_agreement_at_10"] == min(agree)
            assert p["seconds"]["p50_seconds"] == pytest.approx(np.percentile(p["per_query"]["seconds"], 50), abs=1e-4)
            cells.append(
                f"{1000 * p['seconds']['p50_seconds']:,.0f} / {1000 * p['seconds']['p95_seconds']:,.0f},"
                f" {p['agreement_at_10']:.3f} ({p['min_agreement_at_10']:.2f});"
                f" x{base / p['seconds']['p50_seconds']:.2f}"
            )
            at[(name, n)] = p
        expected.append(cells)
        assert point[reference]["agreement_at_10"] == 1.0  # the reference agrees with itself
    assert table(PAGE.read_text(encoding="utf-8"), RERANK) == expected

    def ms(name: str, n: int = 100) -> str:
        return f"{1000 * at[(name, n)]['seconds']['p50_seconds']:.0f} ms"

    def span(name: str, digits: int) -> str:
        values = [at[(name, n)]["agreement_at_10"] for n in data["settings"]["candidates"]]
        return f"{min(values):.{digits}f}–{max(values):.{digits}f}"

    def speedup(name: str, digits: int = 1) -> str:
        ratio = at[(reference, 100)]["seconds"]["p50_seconds"] / at[(name, 100)]["seconds"]["p50_seconds"]
        return f"{ratio:.{digits}f}×"

    search = " ".join(Path(REPO / "docs" / "search.md").read_text(encoding="utf-8").split())
    assert (
        f"re-ranking 100 candidates takes {ms('torch-fp32')} p50 in fp32 torch, {ms('onnx-fp32')} as the ONNX fp32"
        f" export" in search
    )
    assert f"**{ms('torch-bf16')} as the torch bf16 export**" in search
    assert f"which keeps {span('torch-bf16', 3)} of the fp32 re-ranker's top 10" in search
    assert f"{ms('onnx-int8')} as the int8 export, which keeps {span('onnx-int8', 2)}" in search
    cpu = data["environment"]["hardware"]["cpu"]
    assert (
        cpu["avx512"]
        and cpu["model"] == "AMD EPYC"
        and "avx512_bf16" in data["environment"]["hardware"]["cpu_bf16_flags"]
    )
    assert "AMD EPYC host with AVX-512 and avx512_bf16" in search and f"{len(agree)} never-seen" in search
    budget = 500 - 1000 * at[("torch-bf16", 100)]["seconds"]["p50_seconds"]
    assert f"leaves about {10 * round(budget / 10):.0f} ms of the 500 ms budget" in search
    # fp32's count for the same re-ranking time, between N = 50 and 100 by straight line (torch and ONNX)
    counts = []
    for name in ("torch-fp32", "onnx-fp32"):
        low, high = (at[(name, n)]["seconds"]["p50_seconds"] for n in (50, 100))
        counts.append(50 + 50 * (1000 * at[("torch-bf16", 100)]["seconds"]["p50_seconds"] / 1000 - low) / (high - low))
    assert f"in fp32 about {5 * round(min(counts) / 5)}–{5 * round(max(counts) / 5)} candidates" in search
    gains = [at[(reference, n)]["seconds"]["p50_seconds"] / at[("onnx-fp32", n)]["seconds"]["p50_seconds"] - 1
             for n in data["settings"]["candidates"]]  # fmt: skip
    assert f"({100 * min(gains):.0f}–{100 * max(gains):.0f}% faster on this host)" in search
    fast = " ".join(Path(REPO / "docs" / "fast-inference.md").read_text(encoding="utf-8").split())
    assert (
        f"re-ranks 100 candidates {speedup('torch-bf16')} faster than fp32 torch (ONNX fp32: {speedup('onnx-fp32', 2)})"
        f" and keeps {span('torch-bf16', 3)} of fp32's top 10; int8 is {speedup('onnx-int8')} faster but keeps"
        f" {span('onnx-int8', 2)}" in fast
    )


def test_the_mapped_first_stage_table_recomputes() -> None:
    """The mapped first stage (``two_stage_search_mapped.json``): per N, recall@10 of each query mode under each
    first-stage search, worked out here from the file; and what docs/search.md quotes of it holds."""
    data = json.loads((RESULTS / "two_stage_search_mapped.json").read_text(encoding="utf-8"))
    rows = data["results"]["recall"]
    recall = {(r["query_mode"], r["first_stage_search"], r["candidates"]): r["recall_at_10"] for r in rows}
    searches = list(dict.fromkeys(r["first_stage_search"] for r in rows))
    ns = sorted({n for _, _, n in recall})
    expected = [
        [str(n), *(f"{recall[(m, s, n)]:.3f}" for s in searches for m in ("conditioned", "mapped"))] for n in ns
    ]
    page = PAGE.read_text(encoding="utf-8")
    assert table(page, "### The mapped first stage: the corpus vectors mapped under the condition") == expected
    # docs/search.md: mapped beats conditioned at every N and first stage; at N = 100 it passes the 0.90 goal
    assert all(recall[("mapped", s, n)] > recall[("conditioned", s, n)] for s in searches for n in ns)
    assert recall[("mapped", "exact", 100)] >= 0.90 > recall[("conditioned", "exact", 800)]
    selection = json.loads((RESULTS / "two_stage_map_selection.json").read_text(encoding="utf-8"))
    chosen = selection["results"]["chosen"]
    assert f"chosen: M = {chosen['sample']}, ridge {chosen['ridge']}" in page
    assert set(selection["settings"]["conditions"]).isdisjoint(data["settings"]["conditions"])
    from finesim.index.two_stage import MAP_RIDGE, MAP_SAMPLE

    assert (chosen["sample"], chosen["ridge"]) == (MAP_SAMPLE, MAP_RIDGE)  # the library's defaults are the choice


def test_the_mapped_recall_by_corpus_size_recomputes() -> None:
    """Recall@10 by corpus prefix (``two_stage_search_mapped_by_size.json``), per query mode: the header, the cells,
    the change per doubling between the smallest and largest prefix and its straight line continued to the 1M corpus,
    worked out here; the largest prefix is the whole corpus, so its cells are the exact-first-stage recall of
    ``two_stage_search_mapped.json``. Then the goals sentence: the smallest N reaching recall 0.90, the verdict from
    that N's never-seen-condition (cold) latency, and the line's values to four decimals."""
    data = json.loads((RESULTS / "two_stage_search_mapped_by_size.json").read_text(encoding="utf-8"))
    target = json.loads((RESULTS / "two_stage_build_1m.json").read_text(encoding="utf-8"))["settings"]["size"]
    recall = json.loads((RESULTS / "two_stage_search_mapped.json").read_text(encoding="utf-8"))["results"]["recall"]
    full = {(r["query_mode"], r["first_stage_search"], r["candidates"]): r["recall_at_10"] for r in recall}
    points = data["results"]["recall_by_size"]
    page = PAGE.read_text(encoding="utf-8")
    section = page[page.index("Recall@10 by corpus size (`recall_by_size` in `two_stage_search_mapped_by_size") :]
    line = {}
    for mode in ("conditioned", "mapped"):
        cells = {(r["size"], r["candidates"]): r["recall_at_10"] for r in points if r["query_mode"] == mode}
        sizes, ns = sorted({s for s, _ in cells}), sorted({n for _, n in cells})
        assert sizes[-1] == data["settings"]["size"] and sizes[0] * 8 == sizes[-1]  # three doublings
        header = (
            "| N | 6,250 texts | 12,500 texts | 25,000 texts | 50,000 texts | change per doubling of the corpus,"
            " 6,250 → 50,000 | extrapolated to 1,000,000 texts |"
        )
        assert section[section.index(f"`{mode}`:") :].split("\n")[2] == header
        expected = []
        for n in ns:
            assert cells[(sizes[-1], n)] == full[(mode, "exact", n)]
            slope = (cells[(sizes[-1], n)] - cells[(sizes[0], n)]) / 3
            far = cells[(sizes[-1], n)] + slope * math.log2(target / sizes[-1])
            line[(mode, n)] = far
            expected.append([str(n), *(f"{cells[(s, n)]:.3f}" for s in sizes), f"{slope:+.4f}", f"{far:.3f}"])
        assert table(section, f"`{mode}`:") == expected
    goals = page[page.index("Against issue 41's goals (recall@10") :].split("\n")[0]
    timed = json.loads((RESULTS / "two_stage_latency_mapped.json").read_text(encoding="utf-8"))["results"]["latency"]
    cold = {(r["first_stage_search"], r["candidates"]): r["cold"] for r in timed if r["query_mode"] == "mapped"}
    verdicts = []
    for search, words in (("exact", "exact first stage"), ("hnsw", "HNSW first stage")):
        first = min(n for (m, s, n), r in full.items() if m == "mapped" and s == search and r >= 0.90)
        assert f"N = {first} with the {words} ({full[('mapped', search, first)]:.3f})" in goals
        p50, p95 = cold[(search, first)]["p50_seconds"], cold[(search, first)]["p95_seconds"]
        assert f"first query {p50:.1f} / {p95:.1f} s p50 / p95" in goals
        verdicts.append(p50 <= 0.5 and p95 <= 1.0)
    assert f": **{'met' if all(verdicts) else 'not met'}** (its first query" in goals
    assert "**not met**" in goals  # today: the first query of a condition takes seconds
    assert f"N = 200: {line[('mapped', 200)]:.4f}" in goals and "N = 200: 0.8998" in goals  # just under, shown so
    reach = min(n for (m, n), v in line.items() if m == "mapped" and v >= 0.90)
    assert f"the smallest N it puts at the recall goal is {reach}." in goals


def test_the_map_wait_rows_recompute_from_their_files(page_script: ModuleType) -> None:
    """One row per condition of serve_map_wait_on/off.json (and per condition and --map-fit-yield setting of
    serve_map_fit_yield.json): the first search's seconds, the fit's (the first search's own when the server waits),
    and each phase's requests with p50/p95, worked out here from the JSON."""
    text = PAGE.read_text(encoding="utf-8")
    files = [RESULTS / name for name in (*page_script.MAP_WAIT_SERVING, "serve_map_fit_yield.json")]
    if not any(f.is_file() for f in files):
        assert page_script.MAP_WAIT_HEADING not in text
        return
    rows = table(text, page_script.MAP_WAIT_HEADING)

    def cells(summary: dict | None) -> list[str]:
        if not summary or not summary["n"]:
            return ["0", "—", "—"]
        return [str(summary["n"]), f"{summary['p50_ms']:,.0f}", f"{summary['p95_ms']:,.0f}"]

    def answered_by(run: dict) -> str:
        if "first_stage" not in run["search"]:
            return "—"
        text = str(run["search"]["first_stage"])
        for phase in ("during_fit", "after_fit"):
            if phase in run.get("first_stages", {}):
                counts = run["first_stages"][phase]
                text += "; " + (", ".join(f"{k} {counts[k]}" for k in sorted(counts)) or "none")
        return text

    expected = []
    for path in files:
        d = json.loads(path.read_text(encoding="utf-8"))
        waits = "--no-map-wait" not in d["server_command"]
        if waits and "first_stage" in d["runs"][0]["search"]:  # it waited for the map: the map found them
            assert all(run["search"]["first_stage"] == "mapped" for run in d["runs"])
        assert d["settings"]["no_map_wait"] is not waits
        for run in d["runs"]:
            first = run["search"]["seconds"]
            fit = first if waits else run["fit_seconds_seen"]
            if not waits:  # answered long before its condition's map was held
                assert fit is not None and first < fit
            label = d["code"]["label"]
            if "map_fit_yield" in run:  # one file, both settings: the row names its own
                label = f"`--no-map-wait --map-fit-yield {run['map_fit_yield']:g}`"
            expected.append(
                [
                    label,
                    run["condition"],
                    f"{first:.1f}",
                    f"{fit:.1f}",
                    *cells(run["similarity_during_fit"]),
                    *cells(run.get("search_during_fit")),
                    *cells(run.get("search_after_fit")),
                    answered_by(run),
                    f"`{path.name}`",
                ]
            )
    assert rows == expected


def test_the_map_fit_serving_rows_recompute_from_their_files() -> None:
    """One row per condition of each serve_during_map_fit file: the search's seconds, how many /similarity requests
    were answered during it and their p50/p95/max, and the idle p50, worked out here from the JSON."""
    text = PAGE.read_text(encoding="utf-8")
    heading = "## /similarity while a new condition's map is fitted (finesim serve, issue 41)"
    files = [RESULTS / name for name in ("serve_during_map_fit_before.json", "serve_during_map_fit_after.json")]
    if not any(f.is_file() for f in files):
        assert heading not in text
        return
    rows = table(text, heading)
    expected = []
    for path in files:
        d = json.loads(path.read_text(encoding="utf-8"))
        for run in d["runs"]:
            during = run["similarity_during_fit"]
            raw = during.get("latencies_ms") or []
            assert len(raw) in (0, during["n"])  # each probe's wait, where the file records them
            if raw:
                ms = sorted(raw)
                assert during["max_ms"] == pytest.approx(ms[-1], abs=0.05)
                assert during["p50_ms"] == pytest.approx(float(np.percentile(ms, 50)), abs=0.05)
            answered = str(during["n"]) + (f" ({', '.join(f'{v:,.0f}' for v in raw)} ms)" if 0 < len(raw) <= 3 else "")
            stats = [f"{during[k]:,.0f}" if during["n"] else "—" for k in ("p50_ms", "p95_ms", "max_ms")]
            expected.append(
                [
                    d["code"]["label"],
                    f"{d['index']['name']}, {d['index']['count']:,} texts",
                    run["condition"],
                    f"{run['search']['seconds']:.1f}",
                    answered,
                    *stats,
                    f"{run['similarity_idle']['p50_ms']:.0f}",
                    f"`{path.name}`",
                ]
            )
    assert rows == expected


BORROWED = "### A never-seen condition's first query: the map of the nearest condition held"


def test_the_borrowed_map_rows_recompute_from_their_file() -> None:
    """The borrowed-map section: one row per first stage of ``two_stage_borrowed_map.json`` with its recall@10 at
    each N, one row per condition with each pool's donor and cosine, and the per-condition count above
    `conditioned` recomputed here."""
    data = json.loads((RESULTS / "two_stage_borrowed_map.json").read_text(encoding="utf-8"))
    section = _section(PAGE.read_text(encoding="utf-8"), BORROWED)
    ns = data["settings"]["candidates"]
    curves = data["results"]["recall"]
    rows = table(section, BORROWED)
    assert [cells[0] for cells in rows] == list(curves)
    for cells in rows:
        points = {p["candidates"]: p["recall_at_10"] for p in curves[cells[0]]["points"]}
        assert cells[1:] == [f"{points[n]:.3f}" for n in ns], cells[0]
    donors = table(section, "| condition |")
    assert [cells[0] for cells in donors] == data["settings"]["conditions"]
    for cells in donors:
        picked = data["results"]["donors"][cells[0]]
        assert cells[1:] == [
            f"{d['donor']} ({d['cosine']:.2f})"
            if d["donor"] is not None
            else f"none (nearest held: {d['nearest_held']}, {d['cosine']:.2f})"
            for d in picked.values()
        ]
    borrowed = [label for label in curves if label.startswith("mapped, borrowed from ")]
    assert borrowed
    for label in borrowed:
        for n in ns:
            plain = next(p for p in curves["conditioned"]["points"] if p["candidates"] == n)["by_condition"]
            mine = next(p for p in curves[label]["points"] if p["candidates"] == n)["by_condition"]
            above = sum(mine[c] > plain[c] for c in plain)
            assert f"{label.removeprefix('mapped, borrowed from ')} at N = {n}: {above} of {len(plain)}" in section
    # at the time of writing: every nearest donor lifts recall@10 above `conditioned` for every condition at N = 100
    nearest = [label.removeprefix("mapped, borrowed from ") for label in borrowed if "nearest" in label]
    assert nearest and all(f"{label} at N = 100: 6 of 6" in section for label in nearest)


ADAPTIVE = "### Adaptive re-ranking depth: fewer candidates for an easy query"


def test_the_adaptive_depth_rows_and_the_rules_outcome_recompute_from_their_file() -> None:
    """The adaptive-depth section: one row per conditions x first stage x (all N, the chosen setting), its figures
    from ``two_stage_adaptive_depth.json``; the rule's choice and whether it became the default worked out here from
    the selection table (within the tolerance of all N for both first stages, fewest candidates; default when at
    most the share of N for both), and the library's default agrees."""
    from finesim.index.rerank_depth import ADAPTIVE_DEPTH

    data = json.loads((RESULTS / "two_stage_adaptive_depth.json").read_text(encoding="utf-8"))
    settings, select = data["settings"], data["results"]["selection"]
    section = _section(PAGE.read_text(encoding="utf-8"), ADAPTIVE)
    names = [f"all {n}" for n in settings["fixed_candidates"]] + [select["chosen"]]
    expected = []
    for where, part in (("train (selection)", select), ("validation (report)", data["results"]["report"])):
        for mode, rows in part["table"].items():
            for name in names:
                row = rows[name]
                expected.append([where, mode, name, f"{row['recall_at_10']:.3f}", f"{row['candidates_mean']:.1f}",
                                 f"{row['candidates_p50']:.0f}", f"{row['candidates_p95']:.0f}"])  # fmt: skip
    assert table(section, "| conditions |") == expected
    # the rule, recomputed on the exact counts (hits, candidates) the file keeps beside the rounded figures
    top = settings["max_candidates"]
    modes = list(select["table"])

    def recall(mode: str, name: str) -> float:
        row = select["table"][mode][name]
        return row["hits"] / (10 * row["queries"])

    def mean(mode: str, name: str) -> float:
        row = select["table"][mode][name]
        return row["candidates_total"] / row["queries"]

    names = [n for n in select["table"][modes[0]] if not n.startswith("all ")]
    qualifying = [
        n for n in names
        if all(recall(m, n) >= recall(m, f"all {top}") - settings["tolerance"] - 1e-9 for m in modes)
    ]  # fmt: skip
    assert qualifying == select["qualifying"]

    def key(name: str) -> tuple[float, int, int, int]:
        first, step, patience = (int(x) for x in name.split(","))
        return (sum(mean(m, name) for m in modes), -first, -patience, -step)

    chosen = min(qualifying, key=key)
    assert chosen == select["chosen"] and f"chosen `{chosen}`" in section
    default = all(mean(m, chosen) <= settings["default_share"] * top for m in modes)
    assert default == select["becomes_default"]
    assert (ADAPTIVE_DEPTH is None) == (not default)  # the library ships what the rule decided
    assert ("stays the default" in section) == (not default)


FEEDBACK = "### Local-map feedback: the re-ranked candidates steer the next round"


def test_the_feedback_rows_and_the_rules_outcome_recompute_from_their_file() -> None:
    """The local-map feedback section: every setting's row from ``two_stage_feedback.json``; the rule worked out here
    (metric = the mean of the row's recall at the metric's N, the highest chosen, the default when it beats none by
    at least the margin), and the library's default is the chosen setting."""
    from finesim.index.feedback import LOCAL_MAP_FEEDBACK

    data = json.loads((RESULTS / "two_stage_feedback.json").read_text(encoding="utf-8"))
    settings, results = data["settings"], data["results"]
    rows = results["selection"]["recall_at_10"]
    section = _section(PAGE.read_text(encoding="utf-8"), FEEDBACK)
    assert table(section, "| setting (train conditions) |") == [
        [name, *(f"{v:.3f}" for v in row.values()), f"{statistics.mean(row.values()):.4f}"]
        for name, row in rows.items()
    ]
    metric = {name: statistics.mean(row.values()) for name, row in rows.items()}
    chosen = max((n for n in rows if n != "none"), key=lambda n: metric[n])  # the first of equals, as the script
    assert chosen == results["chosen"] and f"chosen `{chosen}`" in section
    default = metric[chosen] - metric["none"] >= settings["min_gain_for_default"] - 1e-9
    assert default == results["becomes_default"]
    if default:  # the library's default is that setting: equal rounds, its ridge, the script's pool
        ridge = float(re.search(r"ridge=([0-9.]+)", chosen).group(1))
        rounds = re.search(r"rounds=([0-9.+]+)", chosen).group(1).split("+")
        assert (LOCAL_MAP_FEEDBACK.ridge, LOCAL_MAP_FEEDBACK.rounds) == (ridge, len(rounds))
        assert len(set(rounds)) == 1 and "it becomes the default" in section
    report = results["report_recall_at_10"]
    assert table(section, "| first stage (validation conditions) |") == [
        [mode, name, *(f"{v:.3f}" for v in row.values())] for mode, per in report.items() for name, row in per.items()
    ]


def test_the_feedback_on_a_map_rows_and_the_rules_outcome_recompute_from_their_file() -> None:
    """The residual-feedback table: one row per conditions x first stage x feedback from
    ``two_stage_feedback_maps.json``; the rule worked out here from the selection rows (the own map's metric may fall
    by at most its tolerance, a borrowed map's must rise by at least its gain)."""
    data = json.loads((RESULTS / "two_stage_feedback_maps.json").read_text(encoding="utf-8"))
    settings, results = data["settings"], data["results"]
    section = _section(PAGE.read_text(encoding="utf-8"), FEEDBACK)
    ns = ["50", "100", "200"]
    expected = [
        [where, kind, name, *(f"{row[n]:.3f}" if n in row else "—" for n in ns)]
        for where, part in (("train (selection)", results["selection"]), ("validation (report)", results["report"]))
        for kind, per in part.items()
        for name, row in per.items()
    ]
    assert table(section, "| conditions | first stage | feedback |") == expected
    from finesim.index.feedback import LOCAL_MAP_FEEDBACK

    assert settings["feedback"].startswith("localmap ridge=") and settings["pool"] == LOCAL_MAP_FEEDBACK.pool
    for kind, margin in (("own map", -settings["own_tolerance"]), ("borrowed map", settings["borrowed_gain"])):
        rows = results["selection"][kind]
        with_it = next(v for name, v in rows.items() if name != "none")
        change = statistics.mean(with_it.values()) - statistics.mean(rows["none"].values())
        assert (change >= margin - 1e-9) == results["applies"][kind]
        assert f"{kind} {change:+.4f} ({'applies' if results['applies'][kind] else 'does not apply'})" in section
    latency = [
        [n, name, f"{row['p50_ms']:,.0f} ms", f"{row['p95_ms']:,.0f} ms", f"{row['recall_at_10']:.3f}",
         ", ".join(f"{k} {v}" for k, v in row["first_stages"].items()), str(row["searches"])]
        for n, per in results["latency"].items()
        for name, row in per.items()
    ]  # fmt: skip
    assert table(section, "| N | feedback | p50 | p95 | recall@10 | first stages |") == latency


def test_the_feedback_by_size_rows_recompute_from_their_files() -> None:
    """The 20k against 50k table: each row's two recalls from the two files and their change."""
    small = json.loads((RESULTS / "two_stage_feedback_maps.json").read_text(encoding="utf-8"))["results"]["report"]
    large = json.loads((RESULTS / "two_stage_feedback_maps_50k.json").read_text(encoding="utf-8"))["results"]["report"]
    section = _section(PAGE.read_text(encoding="utf-8"), FEEDBACK)
    expected = [
        [kind, name, n, f"{row[n]:.3f}", f"{large[kind][name][n]:.3f}", f"{large[kind][name][n] - row[n]:+.3f}"]
        for kind, per in small.items()
        for name, row in per.items()
        for n in ("100", "200")
    ]
    assert table(section, "| first stage | feedback | N | 20k | 50k | change |") == expected
    small_file = json.loads((RESULTS / "two_stage_feedback_maps.json").read_text(encoding="utf-8"))
    large_file = json.loads((RESULTS / "two_stage_feedback_maps_50k.json").read_text(encoding="utf-8"))
    assert small_file["results"]["report_donors"] == large_file["results"]["report_donors"]  # "the donors the same"
    assert small_file["settings"]["report_conditions"] == large_file["settings"]["report_conditions"]


def test_the_feedback_latency_rows_recompute_from_their_files() -> None:
    """The real searches' table: the exact first stage's rows from ``two_stage_feedback.json``, HNSW's from
    ``two_stage_feedback_hnsw.json``."""
    section = _section(PAGE.read_text(encoding="utf-8"), FEEDBACK)
    expected = []
    for name in ("two_stage_feedback.json", "two_stage_feedback_hnsw.json"):
        run = json.loads((RESULTS / name).read_text(encoding="utf-8"))["results"]["latency"]
        stage = run.get("first_stage_search", "exact")
        for n in (k for k in run if k not in ("setting", "first_stage_search")):
            for feedback, row in run[n].items():
                expected.append([stage, n, feedback, f"{row['p50_ms']:,.0f} ms", f"{row['p95_ms']:,.0f} ms",
                                 f"{row['recall_at_10']:.3f}", str(row["searches"])])  # fmt: skip
    assert table(section, "| first stage | N | feedback | p50 |") == expected


def test_the_cached_pairs_sentence_recomputes_from_its_file() -> None:
    """The cached-pairs sentence: its metrics, gain and validation figures from ``two_stage_feedback_cache.json``, the
    rule's outcome worked out here (the gain against the file's margin)."""
    data = json.loads((RESULTS / "two_stage_feedback_cache.json").read_text(encoding="utf-8"))
    results, margin = data["results"], data["settings"]["min_gain"]
    section = _section(PAGE.read_text(encoding="utf-8"), FEEDBACK)
    metric = {name: statistics.mean(row.values()) for name, row in results["selection"].items()}
    gain = metric["feedback + cached pairs"] - metric["feedback"]
    assert abs(gain - results["gain"]) < 1e-3 and (gain >= margin) == results["becomes_default"]
    sel, names = results["selection"], ("feedback", "feedback + cached pairs")
    assert (
        f"rose {results['metric'][names[0]]:.4f} -> {results['metric'][names[1]]:.4f} ({results['gain']:+.4f};"
        f" N = 100: {sel[names[0]]['100']:.3f} -> {sel[names[1]]['100']:.3f})"
        + (", past the rule's margin" if results["becomes_default"] else ", short of the rule's margin")
    ) in section
    report = results["report"]
    for n in report["feedback"]:
        assert f"N = {n}: {report['feedback'][n]:.3f} -> {report['feedback + cached pairs'][n]:.3f}" in section


def test_the_pooled_1m_recall_table_and_goal_recompute_from_the_file() -> None:
    """The 1M pooled-reference section (``two_stage_recall_1m_pooled.json``): one row per (first stage, query mode,
    feedback) with its recall at each N; the acceptance worked out here from the rule's thresholds; the timed searches'
    table and the goal judged on them."""
    data = json.loads((RESULTS / "two_stage_recall_1m_pooled.json").read_text(encoding="utf-8"))
    results, rule = data["results"], data["settings"]["accept_rule"]
    section = _section(PAGE.read_text(encoding="utf-8"), TWO_STAGE)
    ns = sorted({r["candidates"] for r in results["recall"]})
    names = {"exact": "exact first stage", "hnsw": "HNSW first stage"}
    modes = {
        "mapped": "own map (a condition seen before)",
        "borrowed": "a donor's map (never seen)",
        "during-fit": "never seen, its own map fitted meanwhile",
    }
    expected: dict[tuple[str, str, str], list[str]] = {}
    for r in results["recall"]:
        row = expected.setdefault(
            (names[r["first_stage_search"]], modes.get(r["query_mode"], r["query_mode"]), r["rerank_feedback"]),
            [""] * len(ns),
        )
        row[ns.index(r["candidates"])] = f"{r['recall_at_10_pooled']:.3f}"
    assert table(section, "| first stage | query | feedback | N = ") == [[*key, *row] for key, row in expected.items()]
    accepted = results["reference_changed_share"] <= rule["max_changed_share"] and (
        results["check_50k"] is None or results["check_50k"]["held_share"] >= rule["min_held_share_50k"]
    )
    assert results["reference_accepted"] == accepted
    words = "read the figures as upper bounds that are probably close" if accepted else "upper bounds only"
    assert words in section
    # the searches timed (--latency): p50 / p95 ms (own recall) per (query, first stage, feedback, scan threads), N
    timed = results["latency"]
    lat_ns = sorted({t["candidates"] for t in timed})
    timed_rows: dict[tuple[str, ...], list[str]] = {}
    for t in timed:
        threads = "–" if t["first_stage_search"] != "exact" else str(t["scan_threads"] or "default")
        key = (modes[t["query_mode"]] if t["query_mode"] in modes else t["query_mode"], names[t["first_stage_search"]],
               t["rerank_feedback"], threads)  # fmt: skip
        row = timed_rows.setdefault(key, [""] * len(lat_ns))
        ms = f"{1000 * t['p50_seconds']:,.0f} / {1000 * t['p95_seconds']:,.0f}"
        row[lat_ns.index(t["candidates"])] = f"{ms} ({t['recall_at_10_pooled']:.3f})"
    header = "| query | first stage | feedback | scan threads | N = "
    assert table(section, header) == [[*k, *r] for k, r in timed_rows.items()]

    # the goal, worked out here per case: p50 <= 500 ms, p95 <= 1 s, recall >= 0.90, over these searches and the
    # during-fit settings of the fit-yield file and of the N = 100 file (later runs of the same searches)
    fit_points = []
    n100_files = (
        "two_stage_during_fit_n100_first_1m.json",
        "two_stage_during_fit_n100_f16_depth16k_1m.json",
        "two_stage_during_fit_n100_1m.json",
        "two_stage_during_fit_n100_f16_1m.json",
    )  # in the order run
    for name in ("two_stage_fit_yield_1m.json", *n100_files):
        if not (RESULTS / name).is_file():
            continue
        fit_file = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        fit_points += [{**t, "file": name, "reference_accepted": fit_file["results"]["reference_accepted"],
                        "depth": fit_file["settings"]["depth"],
                        "index_dtype": fit_file["settings"].get("index_dtype", "float32")}
                       for t in fit_file["results"]["latency"] if t["query_mode"] == "during-fit"]  # fmt: skip
    assert {t["fit_yield"] for t in fit_points} == {0.0, 1.0}
    assert "two_stage_during_fit_n100_f16_1m.json" in {t["file"] for t in fit_points}
    assert {t["index_dtype"] for t in fit_points} == {"float32", "float16"}

    def setting(t: dict) -> str:
        threads = (
            f", scan threads {t['scan_threads']}" if t["first_stage_search"] == "exact" and t["scan_threads"] else ""
        )
        if "fit_yield" in t:
            waits = f"waiting up to {t['fit_yield']:g} s" if t["fit_yield"] else "not waiting"
            threads += f", the fit's batch {t['fit_batch']} {waits} for a gap between searches"
        if t["query_mode"] == "during-fit":
            threads += ", the donors' maps held, one client's searches back to back in process"
        if t.get("index_dtype") == "float16":
            threads += ", the index stored as float16 (its first stage scanned in float16)"
        if "file" in t:
            rule = "" if t["reference_accepted"] else ", whose reference failed its rule"
            threads += f" (`{t['file']}`, reference depth {t['depth']:,}{rule})"
        return (f"{modes.get(t['query_mode'], t['query_mode'])}, {names[t['first_stage_search']]}{threads},"
                f" N = {t['candidates']}: p50 {1000 * t['p50_seconds']:,.0f} ms, p95 {1000 * t['p95_seconds']:,.0f} ms,"
                f" recall@10 {t['recall_at_10_pooled']:.3f}")  # fmt: skip

    def edge(t: dict) -> str:
        margin = t["recall_at_10_pooled"] - 0.90
        return setting(t) + f" (a margin of {margin:.3f} from {t['searches']} searches: at the goal's edge)" * (
            margin < 0.02
        )

    parts = []
    for name, case_modes in [
        ("a never-seen condition as a server meets it", ("conditioned", "during-fit")),
        ("with the own map's fit stubbed out (a lower bound on time, not a state a server reaches)", ("borrowed",)),
        ("a condition seen before (its own map held; not the goal's case)", ("mapped",)),
    ]:
        case = [t for t in (*timed, *fit_points) if t["query_mode"] in case_modes]
        if not case:
            continue
        met = [t for t in case if t["p50_seconds"] <= 0.5 and t["p95_seconds"] <= 1.0
               and t["recall_at_10_pooled"] >= 0.90]  # fmt: skip
        goal_case = "conditioned" in case_modes
        if met and goal_case:
            # each point on its own: a margin of 0.02 on a reference that passed its run's rule establishes the goal
            solid = [t for t in met if t["recall_at_10_pooled"] - 0.90 >= 0.02
                     and t.get("reference_accepted", results["reference_accepted"])]  # fmt: skip
            short = [t for t in met if t not in solid]
            if solid:
                text = f"{name}: **met** by " + "; ".join(setting(t) for t in solid)
                text += ("; within the bounds without establishing it: " + "; ".join(edge(t) for t in short)) * bool(
                    short
                )
            else:
                text = (f"{name}: **not established**: within the bounds, on recall against the pooled reference (an"
                        " upper bound), with " + "; ".join(edge(t) for t in short))  # fmt: skip
        elif met:
            text = f"{name}: within the bounds with " + "; ".join(edge(t) for t in met)
        else:
            within = [t for t in case if t["p50_seconds"] <= 0.5]
            best = max(within, key=lambda t: t["recall_at_10_pooled"]) if within else None
            words = "**not met**" if goal_case else "not within them"
            text = f"{name}: {words}" + (f" (best recall within the p50 bound: {setting(best)})" if best else "")
        parts.append(text)
    # with these files every during-fit point within the bounds has a failed reference: the goal is not established
    assert "a never-seen condition as a server meets it: **not established**" in section
    files_named = ", ".join(f"`{f}`" for f in dict.fromkeys(t["file"] for t in fit_points))
    assert (f"judged on these timed searches and those of {files_named} (below), on recall against the pooled"
            " reference (an upper bound; taken as the 1M reference where its run passed its rule): "
            + "; ".join(parts) + ".") in section  # fmt: skip
    during = next(t for t in timed if t["query_mode"] == "during-fit")
    fits = sorted(v for v in during["fit_seconds"].values() if v is not None)
    assert f"the map was held {fits[0]:.0f}–{fits[-1]:.0f} s after the first search" in section
    assert "the re-ranking cache emptied once per condition, not before each search" in section
    files = next(line for line in section.splitlines() if line.startswith("Files: "))
    assert "`two_stage_recall_1m_pooled.json`" in files and "`two_stage_latency_1m_feedback.json`" in files
    assert "`two_stage_during_fit_1m.json`" in files
    # the fit's batch: each during-fit point of its own file, p50 / p95 in ms
    from finesim.index.two_stage import MAP_FIT_BATCH

    batches = json.loads((RESULTS / "two_stage_during_fit_1m.json").read_text(encoding="utf-8"))["results"]["latency"]
    assert MAP_FIT_BATCH in {t["fit_batch"] for t in batches}  # the default was measured
    for t in batches:
        default = " (the default since)" if t["fit_batch"] == MAP_FIT_BATCH else ""
        ms = f"p50 {1000 * t['p50_seconds']:,.0f} ms, p95 {1000 * t['p95_seconds']:,.0f} ms"
        assert f"batch {t['fit_batch']}{default}: {ms}" in section
    # the fit's wait for a gap between searches: each setting of its own file, the default named
    from finesim.index.two_stage import MAP_FIT_YIELD

    assert "`two_stage_fit_yield_1m.json`" in files
    assert MAP_FIT_YIELD in {t["fit_yield"] for t in fit_points}
    for t in (t for t in fit_points if t["file"] == "two_stage_fit_yield_1m.json"):
        default = " (the default)" if t["fit_yield"] == MAP_FIT_YIELD else ""
        ms = f"p50 {1000 * t['p50_seconds']:,.0f} ms, p95 {1000 * t['p95_seconds']:,.0f} ms"
        fits = sorted(v for v in t["fit_seconds"].values() if v is not None)
        assert (f"{t['fit_yield']:g} s{default}: {ms}, recall@10 {t['recall_at_10_pooled']:.3f} (fits held after"
                f" {fits[0]:.0f}–{fits[-1]:.0f} s)") in section  # fmt: skip
    # the first-stage scan alone: each setting's p50 / p95 and the share of the float32 scan's rows it kept
    scan = json.loads((RESULTS / "first_stage_scan_1m.json").read_text(encoding="utf-8"))["results"]["scan"]
    assert "`first_stage_scan_1m.json`" in files
    for name, r in scan.items():
        kept = "" if name == "float32" else f", {r['kept_share_of_float32_top']:.4f} of the float32 scan's rows kept"
        assert f"{name}: p50 {r['p50_ms']:,.0f} ms, p95 {r['p95_ms']:,.0f} ms{kept}" in section
    # the N = 100 runs: one sentence, each run's index dtype, file and reference depth, its rule named when it failed
    for t in (t for t in fit_points if t["file"] in n100_files):
        assert f"`{t['file']}`" in files
        failed = "" if t["reference_accepted"] else " (its run's reference failed its rule)"
        assert (f"(`{t['file']}`, {t['index_dtype']}, reference depth {t['depth']:,}): p50"
                f" {1000 * t['p50_seconds']:,.0f} ms, p95 {1000 * t['p95_seconds']:,.0f} ms, recall@10"
                f" {t['recall_at_10_pooled']:.3f}{failed}") in section  # fmt: skip
