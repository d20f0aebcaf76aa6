"""benchmarks/claims/run.py: which (run, seed) pairs a command line selects, and the errors when it selects none."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from claims_scripts import load_script

PLAN = {
    "studies": {
        "csts": [{"id": "bi", "seeds": [42, 1, 2]}, {"id": "zero-shot", "kind": "evaluate"}],
        "ccl": [{"id": "ablation", "seeds": [42]}],
    }
}


@pytest.fixture(scope="module")
def run() -> ModuleType:
    return load_script("run.py")


def _pairs(picked: list) -> list[tuple[str, int]]:
    return [(f"{study}/{spec['id']}", seed) for study, spec, seed in picked]


def test_everything_planned_is_selected_without_filters(run: ModuleType) -> None:
    picked, notes = run.select(PLAN, None, None)
    assert _pairs(picked) == [
        ("csts/bi", 42),
        ("csts/bi", 1),
        ("csts/bi", 2),
        ("csts/zero-shot", 42),
        ("ccl/ablation", 42),
    ]
    assert notes == []


def test_a_study_and_a_seed_filter_pick_the_planned_seeds_and_note_the_rest(run: ModuleType) -> None:
    picked, notes = run.select(PLAN, ["csts"], [1])
    assert _pairs(picked) == [("csts/bi", 1)]
    assert notes == ["csts/zero-shot: seed 1 not in the plan (planned: 42); add it to plan.yaml to run it"]


def test_a_seed_no_selected_run_plans_is_an_error_not_a_silent_success(run: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"nothing to run: ccl/ablation: seed 1, 2 not in the plan \(planned: 42\)"):
        run.select(PLAN, ["ccl/ablation"], [1, 2])


def test_an_unknown_study_or_run_is_named(run: ModuleType) -> None:
    with pytest.raises(ValueError, match="names no study or run of the plan: ccl/typo, nope"):
        run.select(PLAN, ["csts", "ccl/typo", "nope"], None)


def test_the_command_line_exits_2_with_the_message(run: ModuleType, tmp_path: Path, capsys, monkeypatch) -> None:
    import yaml

    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(PLAN), encoding="utf-8")
    monkeypatch.setattr("sys.argv", ["run.py", "--plan", str(plan), "--only", "ccl/ablation", "--seeds", "1", "--list"])
    assert run.main() == 2
    assert "error: nothing to run: ccl/ablation: seed 1 not in the plan" in capsys.readouterr().err
