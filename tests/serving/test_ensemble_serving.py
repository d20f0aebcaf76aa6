"""Serving an ensemble folder (``finesim ensemble``): scores equal ``load_scorer(folder)``'s, including micro-batches
that mix rows with and without a condition; no embeddings, no index; ``/info`` lists the members."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from serving_support import S1, S2, C, assert_error, saved_models, serving, time_limit, wait_until  # noqa: F401

from finesim.serving.cache import LRUCache
from finesim.serving.engine import PairJob, ScoringEngine


@pytest.fixture(scope="module")
def ensembles(saved_models, tmp_path_factory) -> dict[str, Path]:  # noqa: F811
    from finesim.evaluation.ensemble import save_ensemble

    root = tmp_path_factory.mktemp("ensembles")
    return {
        "bi+cross": save_ensemble(root / "bi-cross", [saved_models["bi"], saved_models["cross"]], [3.0, 1.0]),
        "bi+tri": save_ensemble(root / "bi-tri", [saved_models["bi"], saved_models["tri"]]),
    }


def test_an_ensemble_folder_is_served_by_name_with_the_python_scores(ensembles) -> None:
    from fastapi.testclient import TestClient

    from finesim import load_scorer
    from finesim.serving import ServeSettings, create_app

    folder = str(ensembles["bi+cross"])
    reference = load_scorer(folder)
    app = create_app(ServeSettings(model=folder))  # the default loader, as `finesim serve --model FOLDER`
    with TestClient(app) as client:
        wait_until(lambda: client.get("/health").status_code == 200, what="model loaded")
        info = client.get("/info").json()
        assert info["encoder"] == "ensemble" and info["weights"] == [0.75, 0.25] and len(info["members"]) == 2
        assert info["embeddings_endpoint"] is False and info["condition_required"] is False
        got = client.post("/similarity", json={"sentence1": S1, "sentence2": S2, "condition": C})
        assert got.status_code == 200, got.text
        np.testing.assert_allclose(got.json()["scores"], reference.similarity(S1, S2, C), rtol=1e-5, atol=1e-6)
        plain = client.post("/similarity", json={"sentence1": S1, "sentence2": S2}).json()["scores"]
        np.testing.assert_allclose(plain, reference.similarity(S1, S2), rtol=1e-5, atol=1e-6)
        ranked = client.post("/rerank", json={"query": S1[0], "texts": S2, "condition": "the activity"}).json()
        expected = reference.similarity([S1[0]] * len(S2), S2, "the activity")
        assert [r["index"] for r in ranked] == sorted(range(len(S2)), key=lambda i: (-expected[i], i))
        body = assert_error(client.post("/v1/embeddings", json={"input": "a dog"}), 400, "Unsupported")
        assert "ensemble" in body["error"] and "/similarity" in body["error"]


def test_a_batch_mixing_rows_with_and_without_a_condition(ensembles) -> None:
    """One micro-batch holds a request with conditions and one without: each gets what the ensemble gives alone,
    the members 3:1 by hand."""
    from finesim import load_scorer

    scorer = load_scorer(str(ensembles["bi+cross"]))
    bi, cross = scorer.members
    assert (bi.encoder, cross.encoder) == ("bi", "cross")
    results, stats = ScoringEngine(scorer, LRUCache(0)).run([PairJob(S1, S2, list(C)), PairJob(S1, S2, [None] * 4)])
    assert stats.requests == 2 and stats.items == 8
    by_hand = 0.75 * bi.similarity(S1, S2, C) + 0.25 * cross.similarity(S1, S2, C)
    np.testing.assert_allclose(results[0], by_hand, rtol=1e-5, atol=1e-6)
    unconditioned = 0.75 * bi.similarity(S1, S2) + 0.25 * cross.similarity(S1, S2)
    np.testing.assert_allclose(results[1], unconditioned, rtol=1e-5, atol=1e-6)
    assert not np.allclose(results[0], results[1])  # the condition reached the members


def test_an_ensemble_with_a_tri_encoder_needs_a_condition(ensembles) -> None:
    from finesim import load_scorer

    with serving(load_scorer(str(ensembles["bi+tri"]))) as client:
        assert client.get("/info").json()["condition_required"] is True
        refused = client.post("/similarity", json={"sentence1": S1, "sentence2": S2})
        assert_error(refused, 422, "Validation", contains="an ensemble with a member that needs one")
        assert client.post("/similarity", json={"sentence1": S1, "sentence2": S2, "condition": C}).status_code == 200


def test_an_ensemble_cannot_serve_an_index(ensembles, tmp_path) -> None:
    from fastapi.testclient import TestClient

    from finesim import load_scorer
    from finesim.serving import ServeSettings, create_app

    failed = threading.Event()
    scorer = load_scorer(str(ensembles["bi+cross"]))
    settings = ServeSettings(model="ens", index=str(tmp_path / "no-index"))
    app = create_app(settings, loader=lambda: scorer, on_load_error=lambda err: failed.set())
    with TestClient(app) as client:
        assert failed.wait(60)
        body = assert_error(client.get("/health"), 503, "Unhealthy", contains="cannot be served")
        assert "ens is an ensemble" in body["error"] and "serve the member the index was built with" in body["error"]


def test_an_encoder_override_is_refused_for_an_ensemble(ensembles) -> None:
    from fastapi.testclient import TestClient

    from finesim.serving import ServeSettings, create_app

    failed = threading.Event()
    app = create_app(
        ServeSettings(model=str(ensembles["bi+cross"]), encoder="bi"), on_load_error=lambda err: failed.set()
    )
    with TestClient(app) as client:
        assert failed.wait(60)
        assert_error(client.get("/health"), 503, "Unhealthy", contains="an ensemble takes its members as saved")
