"""Ensembles of saved models: the weighted mean of the members' scores, saved as a folder any command loads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from finesim.cli.main import main
from finesim.evaluation.ensemble import EnsembleScorer, normalized_weights

S1 = ["a man plays guitar", "a dog runs in the park", "a girl eats food"]
S2 = ["a woman plays piano", "a cat sits in the house", "a boy eats food"]
C = ["the activity", "the animal", "the person"]


@pytest.fixture()
def members(tiny_bert_dir: Path, tmp_path: Path) -> list[Path]:
    import torch

    from finesim.models.builders import build_bi_encoder, build_cross_encoder
    from finesim.models.io import save_model

    torch.manual_seed(0)
    bi = save_model(build_bi_encoder(str(tiny_bert_dir), max_length=32), tmp_path / "bi", encoder="bi")
    cross = save_model(build_cross_encoder(str(tiny_bert_dir), max_length=64), tmp_path / "cross", encoder="cross")
    return [bi, cross]


def test_weighted_mean_of_the_members(members: list[Path]) -> None:
    from finesim.evaluation.scoring import ConditionalScorer

    a, b = ConditionalScorer(str(members[0])), ConditionalScorer(str(members[1]))
    ens = EnsembleScorer([a, b], [3, 1])
    expected = 0.75 * a.score(S1, S2, C) + 0.25 * b.score(S1, S2, C)
    np.testing.assert_allclose(ens.score(S1, S2, C), expected, atol=1e-6)
    assert ens.weights == [0.75, 0.25]


def test_weights_are_checked() -> None:
    with pytest.raises(ValueError, match="one non-negative weight per member"):
        normalized_weights([1, -1], 2)
    with pytest.raises(ValueError, match="one non-negative weight per member"):
        normalized_weights([1], 2)
    assert normalized_weights(None, 4) == [0.25] * 4


def test_an_ensemble_that_cannot_be_saved_leaves_no_folder(members: list[Path], tmp_path: Path) -> None:
    """The folder was made before the weights and members were checked: a failure left it empty."""
    from finesim.evaluation.ensemble import save_ensemble
    from finesim.models.hub import ModelResolutionError

    with pytest.raises(ValueError, match="one non-negative weight per member"):
        save_ensemble(tmp_path / "a" / "ens", members, weights=[1])
    with pytest.raises(ModelResolutionError, match="does not exist"):
        save_ensemble(tmp_path / "b" / "ens", [members[0], tmp_path / "missing"])
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_saved_ensemble_loads_everywhere(members: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from finesim.evaluation.loading import load_scorer
    from finesim.evaluation.scoring import ConditionalScorer

    folder = tmp_path / "ens"
    assert main(["ensemble", "--model", str(members[0]), "--model", str(members[1]), "--output-dir", str(folder)]) == 0
    marker = json.loads((folder / "finesim_model.json").read_text())
    assert marker["encoder"] == "ensemble" and marker["members"] == ["../bi", "../cross"]
    assert "model_type" not in marker  # encoder is the one key
    ens = load_scorer(str(folder))
    expected = 0.5 * ConditionalScorer(str(members[0])).score(S1, S2, C) + 0.5 * ConditionalScorer(
        str(members[1])
    ).score(S1, S2, C)
    np.testing.assert_allclose(ens.score(S1, S2, C), expected, atol=1e-6)
    # finesim score on it
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        "\n".join(json.dumps({"sentence1": a, "sentence2": b, "condition": c}) for a, b, c in zip(S1, S2, C))
    )
    capsys.readouterr()
    assert main(["score", "--model", str(folder), "--input", str(inp), "--output", str(tmp_path / "o.jsonl")]) == 0
    got = [json.loads(x)["score"] for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # a weight count that does not match is a usage error
    with pytest.raises(SystemExit) as info:
        main(["ensemble", "--model", str(members[0]), "--weight", "1", "--weight", "2", "--output-dir", str(folder)])
    assert info.value.code == 2


def test_an_ensemble_never_replaces_a_model_or_nests(members: list[Path], tmp_path: Path, capsys, caplog) -> None:
    """`finesim ensemble --output-dir` a member's folder replaced that model's marker with the ensemble's: the model
    was lost. A nested ensemble was saved and failed at use; members of two label scales were averaged without a
    word (a warning now: a contrastive member records scale none without mixing anything)."""
    from finesim.evaluation.ensemble import save_ensemble
    from finesim.models.hub import MARKER_FILE

    before = (members[0] / MARKER_FILE).read_text(encoding="utf-8")
    argv = ["ensemble", "--model", str(members[0]), "--model", str(members[1]), "--output-dir", str(members[0])]
    assert main(argv) == 1
    assert "holds other files (a model?): an ensemble is written to a new or empty folder" in capsys.readouterr().err
    assert (members[0] / MARKER_FILE).read_text(encoding="utf-8") == before
    ens = save_ensemble(tmp_path / "ens", members)
    assert save_ensemble(tmp_path / "ens", members, weights=[3, 1]) == ens  # an ensemble's own folder: replaced
    assert json.loads((ens / MARKER_FILE).read_text(encoding="utf-8"))["weights"] == [0.75, 0.25]
    with pytest.raises(ValueError, match="is an ensemble: list its members instead"):
        save_ensemble(tmp_path / "nested", [ens, members[0]])
    marker = json.loads((members[1] / MARKER_FILE).read_text(encoding="utf-8"))
    marker.setdefault("card", {})["recipe"] = {"labels": {"scale": "none"}}
    (members[1] / MARKER_FILE).write_text(json.dumps(marker), encoding="utf-8")
    marker = json.loads((members[0] / MARKER_FILE).read_text(encoding="utf-8"))
    marker.setdefault("card", {})["recipe"] = {"labels": {"scale": "minmax"}}
    (members[0] / MARKER_FILE).write_text(json.dumps(marker), encoding="utf-8")
    with caplog.at_level("WARNING", logger="finesim.models"):
        save_ensemble(tmp_path / "mixed", members)
    assert re.search(r"different label scales \(.*: minmax, .*: none\): the mean of their scores may mix", caplog.text)
    assert not (tmp_path / "nested").exists()
