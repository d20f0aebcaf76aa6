"""An index whose first stage is another model (``--first-stage runs/tri/model``), moved with its project or used
from another working directory: exact search needs no first stage (it is loaded on the first two-stage search or
add), a first-stage folder that is gone is said as such (the recorded name, the folder at build, what to do), and
``first_stage=`` / ``--first-stage PATH`` names where it is now."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from index_helpers import build_model_dirs, make_corpus

from finesim import ConditionalIndex
from finesim.cli.main import main
from finesim.index.two_stage import FirstStageEncoder
from finesim.models.hub import ModelResolutionError

QUERY, CONDITION = "a man plays guitar", "the sport"


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus(40, seed=8)


@pytest.fixture()
def moved(model_dirs, corpus, tmp_path, monkeypatch) -> dict[str, object]:
    """A project (its bi-encoder and tri-encoder student under runs/, the index built from the project folder with
    relative names), then moved elsewhere and used from a third folder; the searches of the index as built."""
    project = tmp_path / "project"
    for name, source in (("bi", "bi"), ("tri", "tri-hadamard")):
        shutil.copytree(model_dirs[source], project / "runs" / name / "model")
    monkeypatch.chdir(project)
    built = ConditionalIndex.build("runs/bi/model", corpus, "idx", first_stage="runs/tri/model")
    assert built.first_stage_spec is not None and built.first_stage_spec.query == "tri"
    expected = {
        "exact": built.search(QUERY, "the colour", k=5, strategy="exact"),
        "two-stage": built.search(QUERY, CONDITION, k=5, strategy="two-stage", candidates=10),
    }
    new = tmp_path / "elsewhere" / "project"
    new.parent.mkdir()
    shutil.move(project, new)
    monkeypatch.chdir(tmp_path)
    return {"old": project, "new": new, "index": new / "idx", "expected": expected}


def test_exact_search_of_a_moved_index_needs_no_first_stage_and_two_stage_says_it_is_gone(moved, caplog):
    new, old = moved["new"], moved["old"]
    caplog.set_level(logging.WARNING, logger="finesim")
    index = ConditionalIndex.open(moved["index"], model=str(new / "runs" / "bi" / "model"))
    warned = [r.getMessage() for r in caplog.records if "first-stage model" in r.getMessage()]
    assert len(warned) == 1 and "'runs/tri/model'" in warned[0] and "exact search works" in warned[0]
    assert index.search(QUERY, "the colour", k=5, strategy="exact") == moved["expected"]["exact"]
    with pytest.raises(FileNotFoundError) as err:
        index.search(QUERY, CONDITION, k=5)  # auto: a condition not stored, so two-stage
    message = str(err.value)
    assert message.startswith(f"{moved['index'] / 'manifest.json'}: the index's first-stage model (recorded as ")
    assert f"'runs/tri/model', the folder {old / 'runs' / 'tri' / 'model'} when the index was built" in message
    assert "does not exist" in message and "first_stage=PATH" in message and "--strategy exact" in message
    assert "is not one" not in message  # not "needs a finesim tri-encoder, but ... is not one"
    with pytest.raises(FileNotFoundError, match="the index's first-stage model"):
        index.add(["a new text"])  # an add embeds the new rows for the first stage too


def test_first_stage_names_where_the_first_stage_model_is_now(moved):
    new = moved["new"]
    index = ConditionalIndex.open(
        moved["index"], model=str(new / "runs" / "bi" / "model"), first_stage=new / "runs" / "tri" / "model"
    )
    assert index.search(QUERY, CONDITION, k=5, strategy="two-stage", candidates=10) == moved["expected"]["two-stage"]
    wrong = ConditionalIndex.open(moved["index"], model=str(new / "runs" / "bi" / "model"), first_stage="nowhere/x/y")
    with pytest.raises(FileNotFoundError, match=r"first-stage model \(given as 'nowhere/x/y'; recorded as "):
        wrong.search(QUERY, CONDITION, k=5)
    with pytest.raises(ValueError, match="this index's first stage is the index's own model"):
        ConditionalIndex.open(
            ConditionalIndex.build(str(new / "runs" / "bi" / "model"), ["a b c"], new / "self").store.root,
            first_stage=new / "runs" / "tri" / "model",
        )


def test_a_gone_first_stage_folder_is_said_before_what_it_should_be():
    with pytest.raises(ModelResolutionError, match="model folder 'gone/runs/tri/model' does not exist"):
        FirstStageEncoder(None, "gone/runs/tri/model", "tri")


def test_the_command_line_searches_a_moved_index_exactly_and_takes_first_stage(moved, capsys):
    new, index = moved["new"], str(moved["index"])
    model = ["--model", str(new / "runs" / "bi" / "model")]
    query = ["index", "search", index, "--query", QUERY, "-k", "5", "--json", "-q", *model]
    capsys.readouterr()
    assert main([*query, "--condition", "the colour", "--strategy", "exact"]) == 0
    assert json.loads(capsys.readouterr().out) == moved["expected"]["exact"]
    assert main([*query, "--condition", CONDITION, "--strategy", "two-stage", "--candidates", "10"]) == 1
    err = capsys.readouterr().err
    assert "the index's first-stage model (recorded as 'runs/tri/model'" in err and "--first-stage PATH" in err
    stage = ["--first-stage", str(new / "runs" / "tri" / "model")]
    assert main([*query, "--condition", CONDITION, "--strategy", "two-stage", "--candidates", "10", *stage]) == 0
    assert json.loads(capsys.readouterr().out) == moved["expected"]["two-stage"]
    self_index = ConditionalIndex.build(str(new / "runs" / "bi" / "model"), ["a b c"], new / "self").store.root
    with pytest.raises(SystemExit) as exit_:  # a usage error, before any model loads
        main(["index", "search", str(self_index), "--query", "a", "--condition", "b", *stage])
    assert exit_.value.code == 2
    assert "--first-stage names where the index's first-stage model is now" in capsys.readouterr().err


def test_a_server_of_a_moved_index_takes_first_stage(moved):
    """``finesim serve --index`` loads the first stage before its port opens: a moved one is refused, saying so, and
    ``--first-stage`` (``ServeSettings.first_stage``) names where it is now."""
    from finesim.evaluation.loading import load_scorer
    from finesim.serving import ServeSettings
    from finesim.serving.search import IndexOpenError, open_served_index

    new = moved["new"]
    model = str(new / "runs" / "bi" / "model")
    scorer = load_scorer(model)
    with pytest.raises(IndexOpenError, match="the index's first-stage model"):
        open_served_index(ServeSettings(model=model, index=str(moved["index"])), scorer)
    settings = ServeSettings(model=model, index=str(moved["index"]), first_stage=str(new / "runs" / "tri" / "model"))
    index = open_served_index(settings, scorer)
    assert index.search(QUERY, CONDITION, k=5, strategy="two-stage", candidates=10) == moved["expected"]["two-stage"]
