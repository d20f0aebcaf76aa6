"""Model soups (finesim.models.soup, ``finesim soup``): the weight average by hand, the members it refuses, and a soup
that loads and scores like any finesim model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from finesim.models.io import read_marker, save_model
from finesim.models.soup import average_state, make_soup, member_markers


def test_floats_are_averaged_and_integer_buffers_kept() -> None:
    ids = torch.arange(3)
    a = {"w": torch.tensor([1.0, 2.0]), "h": torch.tensor([256.0], dtype=torch.bfloat16), "ids": ids}
    b = {"w": torch.tensor([3.0, 6.0]), "h": torch.tensor([1.0], dtype=torch.bfloat16), "ids": ids.clone()}
    c = {"w": torch.tensor([2.0, 1.0]), "h": torch.tensor([1.0], dtype=torch.bfloat16), "ids": ids.clone()}
    out = average_state([a, b, c])
    assert torch.equal(out["w"], torch.tensor([2.0, 3.0]))  # (1 + 3 + 2) / 3, (2 + 6 + 1) / 3
    # averaged in fp32 (258 / 3 = 86.0, exact in bf16) and cast back; summing in bf16 gives 85.5 (256 + 1 rounds
    # to 256 in bf16's 8-bit mantissa)
    assert out["h"].dtype == torch.bfloat16 and out["h"].item() == 86.0
    assert torch.equal(out["ids"], ids)


def test_members_of_another_architecture_are_refused_by_name() -> None:
    a = {"w": torch.zeros(2), "ids": torch.arange(2)}
    with pytest.raises(ValueError, match=r"member 1: w has shape \(3,\), member 0 \(2,\)"):
        average_state([a, {"w": torch.zeros(3), "ids": torch.arange(2)}])
    with pytest.raises(ValueError, match=r"member 1 has other parameters than member 0: it lacks \['w'\], has \['v'\]"):
        average_state([a, {"v": torch.zeros(2), "ids": torch.arange(2)}])
    with pytest.raises(ValueError, match="member 2: the non-float tensor ids differs"):
        average_state([a, dict(a), {"w": torch.zeros(2), "ids": torch.tensor([1, 0])}])


def _member(tiny_model, folder: Path, shift: float) -> Path:
    """The tiny model with every float weight moved by ``shift``, saved as a finesim bi-encoder."""
    with torch.no_grad():
        for parameter in tiny_model.parameters():
            parameter.add_(shift)
    save_model(tiny_model, folder, encoder="bi")
    with torch.no_grad():
        for parameter in tiny_model.parameters():
            parameter.sub_(shift)
    return folder


def test_a_soup_is_the_members_mean_and_scores_like_a_model(tiny_model, tmp_path: Path) -> None:
    from finesim.evaluation.scoring import ConditionalScorer

    original = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    members = [_member(tiny_model, tmp_path / name, shift) for name, shift in (("a", 0.03), ("b", -0.01), ("c", -0.02))]
    folder = make_soup(members, tmp_path / "soup")
    soup = ConditionalScorer(folder)
    for name, tensor in soup.model.state_dict().items():
        expected = original[name] if not torch.is_floating_point(tensor) else original[name] + 0.0  # (0.03-0.01-0.02)/3
        assert torch.allclose(tensor, expected, atol=1e-6), name
    plain = ConditionalScorer(tiny_model, encoder="bi")
    pairs = (["a cat sat", "a dog ran"], ["a cat sat down", "the dog runs"], ["the animal", "the animal"])
    assert torch.allclose(torch.as_tensor(soup.score(*pairs)), torch.as_tensor(plain.score(*pairs)), atol=1e-5)
    card = read_marker(folder)["card"]
    assert card["metrics"] == {}  # the members' scores do not carry over
    assert card["details"]["model soup"].startswith("uniform weight average of 3 fine-tunings")
    assert not list(tmp_path.glob(".tmp-*"))  # the staging folder is gone


def test_members_that_cannot_make_a_soup_are_refused(tiny_model, tmp_path: Path) -> None:
    a = _member(tiny_model, tmp_path / "a", 0.0)
    with pytest.raises(ValueError, match="a soup needs two or more models, got 1"):
        member_markers([a])
    plain = tmp_path / "plain"
    tiny_model.save(str(plain))  # no finesim marker
    with pytest.raises(ValueError, match=r"plain: not a model folder finesim saved \(no finesim_model.json\)"):
        member_markers([a, plain])
    other = tmp_path / "other"
    save_model(tiny_model, other, encoder="bi")
    marker = json.loads((other / "finesim_model.json").read_text())
    marker["card"]["base_model"] = "someone/else"
    (other / "finesim_model.json").write_text(json.dumps(marker))
    first = "tiny/base"
    mine = json.loads((a / "finesim_model.json").read_text())
    mine["card"]["base_model"] = first
    (a / "finesim_model.json").write_text(json.dumps(mine))
    with pytest.raises(ValueError, match=f"was fine-tuned from {first} but .*other from someone/else"):
        member_markers([a, other])
    marker["card"]["base_model"] = first
    marker["encoder"] = "cross"
    (other / "finesim_model.json").write_text(json.dumps(marker))
    with pytest.raises(ValueError, match=r"a is a bi-encoder but .*other a cross-encoder"):
        member_markers([a, other])
    marker["encoder"], marker["runtime"] = "bi", {"format": "onnx", "quantize": "int8"}
    (other / "finesim_model.json").write_text(json.dumps(marker))
    with pytest.raises(ValueError, match="other: an export"):
        member_markers([a, other])
    ensemble = tmp_path / "ens"
    ensemble.mkdir()
    (ensemble / "finesim_model.json").write_text(json.dumps({"encoder": "ensemble"}))
    with pytest.raises(ValueError, match="ens: a finesim 'ensemble' folder"):
        member_markers([a, ensemble])


def test_cli_soup(tiny_model, tmp_path: Path, capsys) -> None:
    from finesim.cli.main import main

    a, b = _member(tiny_model, tmp_path / "a", 0.01), _member(tiny_model, tmp_path / "b", -0.01)
    out = tmp_path / "soup"
    assert main(["soup", "--model", str(a), "--model", str(b), "--output-dir", str(out)]) == 0
    assert "the bi-encoder soup of 2 models" in capsys.readouterr().out
    assert (out / "finesim_model.json").is_file() and (out / "README.md").is_file()
    for argv, message in (
        (["--model", str(a), "--model", str(b), "--output-dir", str(out)], "the folder is not empty"),
        (["--model", str(a), "--output-dir", str(tmp_path / "one")], "a soup needs two or more --model folders, got 1"),
        (["--model", str(a), "--model", str(tmp_path), "--output-dir", str(tmp_path / "one")], "not a model folder"),
    ):
        with pytest.raises(SystemExit) as exit_:  # usage errors: exit 2, the message on stderr
            main(["soup", *argv])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "one").exists()


def _set_base(folder: Path, base: str | None) -> None:
    marker = json.loads((folder / "finesim_model.json").read_text())
    marker["card"]["base_model"] = base
    (folder / "finesim_model.json").write_text(json.dumps(marker))


def test_base_models_are_compared_by_their_resolved_names(tiny_model, tmp_path: Path) -> None:
    a, b, c = (_member(tiny_model, tmp_path / name, 0.0) for name in "abc")
    _set_base(a, None)  # unknown: the others are still compared with each other
    _set_base(b, "minilm")
    _set_base(c, "sentence-transformers/all-MiniLM-L6-v2")  # minilm's Hub id: one base
    assert len(member_markers([a, b, c])) == 3
    _set_base(c, "org/other")
    with pytest.raises(ValueError, match=r"b was fine-tuned from sentence-transformers/all-MiniLM-L6-v2 but .*c from"):
        member_markers([a, b, c])
    with pytest.raises(ValueError, match="is given twice"):
        member_markers([a, b, tmp_path / "a"])


def test_members_set_up_otherwise_are_refused_by_folder(tiny_model, tmp_path: Path, capsys) -> None:
    from finesim.cli.main import main
    from finesim.models.io import set_pooling

    a = _member(tiny_model, tmp_path / "a", 0.0)
    set_pooling(tiny_model, "cls")
    b = _member(tiny_model, tmp_path / "b", 0.0)
    with pytest.raises(SystemExit) as exit_:
        main(["soup", "--model", str(a), "--model", str(b), "--output-dir", str(tmp_path / "soup")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{b} is set up otherwise than {a}" in err and "Pooling" in err
    assert not (tmp_path / "soup").exists()


def test_the_soup_card_drops_member_0s_training_line(tiny_model, tmp_path: Path) -> None:
    a, b = _member(tiny_model, tmp_path / "a", 0.01), _member(tiny_model, tmp_path / "b", -0.01)
    marker = json.loads((a / "finesim_model.json").read_text())
    marker["card"]["details"] = {"Training": "100 steps (seed 42)", "Prompt": "kept"}
    (a / "finesim_model.json").write_text(json.dumps(marker))
    details = read_marker(make_soup([a, b], tmp_path / "soup"))["card"]["details"]
    assert "Training" not in details and details["Prompt"] == "kept"
    assert "each member ran its own seed" in details["model soup"]


def test_dropout_may_differ_but_modules_may_not(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    """A dropout sweep's members soup (dropout acts only in training); a member with another module (Normalize)
    is refused by name, not with an internal error."""
    from sentence_transformers.sentence_transformer.modules import Dropout, Normalize

    from finesim.cli.main import main
    from finesim.models import load_sentence_model
    from finesim.models.soup import settings

    plain, dropped, normalized = (load_sentence_model(str(tiny_bert_dir), max_length=64) for _ in range(3))
    dropped.append(Dropout(0.2))
    normalized.append(Normalize())
    assert settings(dropped) == settings(plain)
    a, b = _member(plain, tmp_path / "a", 0.0), _member(normalized, tmp_path / "b", 0.0)
    with pytest.raises(SystemExit) as exit_:
        main(["soup", "--model", str(a), "--model", str(b), "--output-dir", str(tmp_path / "soup")])
    assert exit_.value.code == 2 and f"{b} has other modules than {a}" in capsys.readouterr().err


def test_members_of_different_label_scales_are_told(tiny_model, tmp_path: Path, caplog) -> None:
    """A soup of a model trained to min-max scaled labels and one trained to raw 1-5 labels was made, its card
    keeping member 0's scale, without a word (a warning: a contrastive member's recorded none mixes nothing)."""
    a, b = (_member(tiny_model, tmp_path / name, 0.0) for name in "ab")
    for folder, scale in ((a, "minmax"), (b, "none")):
        marker = json.loads((folder / "finesim_model.json").read_text(encoding="utf-8"))
        marker.setdefault("card", {})["recipe"] = {"labels": {"scale": scale}}
        (folder / "finesim_model.json").write_text(json.dumps(marker), encoding="utf-8")
    with caplog.at_level("WARNING", logger="finesim.models"):
        member_markers([a, b])
    assert re.search(r"label scales \(.*a: minmax, .*b: none\): the mean of their weights may mix", caplog.text)
