"""Shared by the index tests (imported, not a conftest: the test folders have no packages): tiny bi-, tri- (every head
kind) and CASE model folders, a small corpus, and brute-force search to compare with."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from conftest import WORDS


def make_corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct short texts over the tiny vocabulary (deterministic)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out[" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))] = None
    return list(out)


_MODEL_DIRS: dict[Path, dict[str, Path]] = {}


def build_model_dirs(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Model folders by name (built once per session): ``bi`` (the plain tiny BERT), ``tri-hadamard``,
    ``tri-concat``, ``tri-hypernet``, ``tri-hadamard-2`` (another random head), ``case``."""
    if tiny_bert_dir in _MODEL_DIRS:
        return _MODEL_DIRS[tiny_bert_dir]
    import torch

    from finesim.case import CaseModel, CaseProjection, ConditionAwareEncoder, PromptFormat
    from finesim.models import load_sentence_model
    from finesim.models.builders import build_tri_encoder
    from finesim.models.io import save_model

    root = tmp_path_factory.mktemp("index-models")
    dirs = {"bi": tiny_bert_dir}
    for name, head, seed in [
        ("tri-hadamard", "hadamard", 1),
        ("tri-concat", "concat", 2),
        ("tri-hypernet", "hypernet", 3),
        ("tri-hadamard-2", "hadamard", 4),
    ]:
        torch.manual_seed(seed)
        model = build_tri_encoder(str(tiny_bert_dir), head=head, transform=head == "concat", max_length=64)
        dirs[name] = save_model(model, root / name, encoder="tri")
    torch.manual_seed(5)
    encoder = ConditionAwareEncoder(
        load_sentence_model(str(tiny_bert_dir), max_length=64), PromptFormat("mlm", "conc_cs"), model_name="tiny"
    )
    encoder.description["model"] = str(tiny_bert_dir)
    dirs["case"] = CaseModel(encoder, CaseProjection("nonlinear", 32, 16)).save(root / "case")
    _MODEL_DIRS[tiny_bert_dir] = dirs
    return dirs


SCORE_TOLERANCE = 2e-5  # the index's float32 scores against the scorer's: summation order differs by CPU kernel


def all_scores(model: str | Path, query: str, texts: Sequence[str], condition: str) -> np.ndarray:
    """Every (query, text, condition)'s score by ``ConditionalScorer``."""
    from finesim import ConditionalScorer

    return ConditionalScorer(str(model)).similarity([query] * len(texts), list(texts), condition)


def brute_force(
    model: str | Path, query: str, texts: Sequence[str], condition: str, k: int
) -> tuple[list[int], np.ndarray]:
    """Top-k rows and scores by scoring every (query, text, condition) with ``ConditionalScorer`` (ties: lower row)."""
    scores = all_scores(model, query, texts, condition)
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return [int(i) for i in order], scores[order]


def assert_matches_brute_force(
    results: list[dict], model: str | Path, query: str, texts: Sequence[str], condition: str, k: int
) -> None:
    """``results`` are the brute-force top-k: the same scores rank by rank, and the same rows in the same order
    except where two scores lie within ``SCORE_TOLERANCE`` (float noise may order such near-ties either way on
    another CPU); every row left out scores no higher than the last one kept."""
    scores = all_scores(model, query, texts, condition)
    rows, top = brute_force(model, query, texts, condition, k)
    got = [r["index"] for r in results]
    assert [r["text"] for r in results] == [texts[i] for i in got]
    np.testing.assert_allclose([r["score"] for r in results], top, atol=SCORE_TOLERANCE)
    np.testing.assert_allclose(scores[got], top, atol=SCORE_TOLERANCE)  # each kept row's own score, rank by rank
    if got != rows:  # only near-ties may swap: the rows must still be a valid top k
        assert len(set(got)) == len(got) == len(rows)
        left_out = np.delete(scores, got)
        assert left_out.size == 0 or left_out.max() <= top[-1] + SCORE_TOLERANCE


def overwrite_with_garbage(path: Path, *, nan: bool = True, seed: int = 0) -> None:
    """Replace the data of a float32 ``.npy`` file with random values of the same length (NaNs among them with
    ``nan``), keeping its header: a damage that shape and size checks cannot see."""
    from finesim.index.store import npy_layout

    offset = npy_layout(path)[2]
    data = path.read_bytes()
    garbage = np.random.default_rng(seed).standard_normal((len(data) - offset) // 4).astype(np.float32)
    if nan:
        garbage[::7] = np.nan
    path.write_bytes(data[:offset] + garbage.tobytes())
