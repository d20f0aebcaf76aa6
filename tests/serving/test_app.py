"""The endpoints: scores equal the Python scorer's for every model type, rerank, embeddings per encoder type,
health while loading, info, and the error shape of every failure."""

from __future__ import annotations

import base64
import threading

import numpy as np
import pytest
from serving_support import (  # noqa: F401
    S1,
    S2,
    C,
    assert_error,
    saved_models,
    scorers,
    serving,
    time_limit,
    wait_until,
)

KINDS = ["bi", "tri", "cross", "case"]


@pytest.mark.parametrize("kind", KINDS)
def test_similarity_equals_the_python_scorer(kind, saved_models, scorers) -> None:  # noqa: F811
    """The server loads the saved folder by name (the loading helpers) and answers what
    ``ConditionalScorer(folder).similarity`` gives for the same rows: per-pair conditions and one for all."""
    from fastapi.testclient import TestClient

    from finesim.serving import ServeSettings, create_app

    app = create_app(ServeSettings(model=str(saved_models[kind])))  # the default loader: by name
    with TestClient(app) as client:
        wait_until(lambda: client.get("/health").status_code == 200, what="model loaded")
        info = client.get("/info").json()
        assert info["encoder"] == kind and info["model"] == str(saved_models[kind])
        reference = scorers[kind]
        got = client.post("/similarity", json={"sentence1": S1, "sentence2": S2, "condition": C})
        assert got.status_code == 200, got.text
        np.testing.assert_allclose(got.json()["scores"], reference.similarity(S1, S2, C), rtol=1e-5, atol=1e-6)
        one = client.post("/similarity", json={"sentence1": S1, "sentence2": S2, "condition": "the animal"})
        expected = reference.similarity(S1, S2, "the animal")
        np.testing.assert_allclose(one.json()["scores"], expected, rtol=1e-5, atol=1e-6)


def test_plain_sentence_transformers_folder_is_served_as_a_bi_encoder(saved_models) -> None:  # noqa: F811
    from finesim.evaluation.scoring import ConditionalScorer

    folder = str(saved_models["plain"])
    with serving(lambda: ConditionalScorer(folder), model=folder) as client:
        assert client.get("/info").json()["encoder"] == "bi"
        got = client.post("/similarity", json={"sentence1": S1, "sentence2": S2}).json()["scores"]
        np.testing.assert_allclose(got, ConditionalScorer(folder).similarity(S1, S2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_rerank_orders_best_first(kind, scorers) -> None:  # noqa: F811
    texts = ["a cat sits in the house", "a man plays guitar", "a dog runs", "a woman plays piano"]
    with serving(scorers[kind]) as client:
        got = client.post("/rerank", json={"query": "a man plays piano", "texts": texts, "condition": "the activity"})
        assert got.status_code == 200, got.text
        ranked = got.json()
        expected = scorers[kind].similarity(["a man plays piano"] * 4, texts, "the activity")
        assert [r["index"] for r in ranked] == sorted(range(4), key=lambda i: -expected[i])
        np.testing.assert_allclose([r["score"] for r in ranked], sorted(expected, reverse=True), rtol=1e-5, atol=1e-6)
        top = client.post("/rerank", json={"query": "a man", "texts": texts, "condition": "the activity", "top_n": 2})
        assert len(top.json()) == 2 and set(top.json()[0]) == {"index", "score"}


def test_embeddings_of_a_bi_encoder(scorers) -> None:  # noqa: F811
    scorer = scorers["bi"]
    with serving(scorer, model="my-bi") as client:
        got = client.post("/v1/embeddings", json={"input": ["a man plays", "a dog"], "condition": "the activity"})
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["object"] == "list" and body["model"] == "my-bi"
        assert [d["index"] for d in body["data"]] == [0, 1] and body["data"][0]["object"] == "embedding"
        expected = scorer.model.encode([("a man plays", "the activity"), ("a dog", "the activity")])
        np.testing.assert_allclose([d["embedding"] for d in body["data"]], expected, rtol=1e-5, atol=1e-6)
        tokens = sum(
            len(x) for x in scorer.model.tokenizer(["a man plays", "a dog"], ["the activity"] * 2)["input_ids"]
        )
        assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
        # a single string, without condition: the text alone
        alone = client.post("/v1/embeddings", json={"input": "a man plays", "model": "whatever"}).json()
        np.testing.assert_allclose(alone["data"][0]["embedding"], scorer.model.encode(["a man plays"])[0], atol=1e-6)
        # base64: little-endian float32, as OpenAI's clients decode it
        packed = client.post("/v1/embeddings", json={"input": "a man plays", "encoding_format": "base64"}).json()
        vector = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
        np.testing.assert_allclose(vector, alone["data"][0]["embedding"], rtol=1e-6)


def test_embeddings_of_a_case_model_need_a_condition(scorers) -> None:  # noqa: F811
    case = scorers["case"]
    with serving(case) as client:
        got = client.post("/v1/embeddings", json={"input": ["a man plays", "a dog"], "condition": "the activity"})
        assert got.status_code == 200, got.text
        expected = case.model.embed(["a man plays", "a dog"], ["the activity"] * 2)
        np.testing.assert_allclose([d["embedding"] for d in got.json()["data"]], expected, rtol=1e-5, atol=1e-6)
        assert len(got.json()["data"][0]["embedding"]) == client.get("/info").json()["embedding_dimension"] == 8
        assert got.json()["usage"]["prompt_tokens"] > 0
        assert_error(client.post("/v1/embeddings", json={"input": "a dog"}), 422, "Validation", contains="condition")


@pytest.mark.parametrize(("kind", "says"), [("tri", "fused"), ("cross", "no embeddings")])
def test_embeddings_of_tri_and_cross_encoders_are_refused(kind, says, scorers) -> None:  # noqa: F811
    with serving(scorers[kind]) as client:
        body = assert_error(
            client.post("/v1/embeddings", json={"input": "a dog", "condition": "the animal"}), 400, "Unsupported"
        )
        assert says in body["error"] and "/similarity" in body["error"]
        if kind == "tri":
            assert "without the condition" in body["error"] and "pairwise" in body["error"]


def test_health_is_503_while_the_model_loads(scorers) -> None:  # noqa: F811
    release = threading.Event()

    def slow_loader():
        assert release.wait(30)
        return scorers["bi"]

    with serving(slow_loader, ready=False) as client:
        assert_error(client.get("/health"), 503, "Unhealthy", contains="loading")
        assert client.get("/info").json()["status"] == "loading"
        assert_error(client.post("/similarity", json={"sentence1": ["a"], "sentence2": ["b"]}), 503, "Unhealthy")
        assert client.get("/metrics").status_code == 200
        release.set()
        wait_until(lambda: client.get("/health").status_code == 200, what="/health 200")
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/info").json()["status"] == "ready"


def test_a_failed_load_is_reported(scorers) -> None:  # noqa: F811
    failed = threading.Event()

    def broken():
        raise OSError("no such model: nowhere/nothing")

    from fastapi.testclient import TestClient

    from finesim.serving import ServeSettings, create_app

    app = create_app(ServeSettings(model="nowhere"), loader=broken, on_load_error=lambda err: failed.set())
    with TestClient(app) as client:
        assert failed.wait(30)
        assert_error(client.get("/health"), 503, "Unhealthy", contains="no such model")
        assert client.get("/info").json()["status"] == "failed"


def test_info_describes_model_and_limits(saved_models, scorers) -> None:  # noqa: F811
    import finesim

    with serving(scorers["case"], model="case-model", max_items=7, max_text_chars=99, max_batch_inputs=3) as client:
        info = client.get("/info").json()
    assert info["model"] == "case-model" and info["encoder"] == "case" and info["status"] == "ready"
    assert info["finesim_version"] == finesim.__version__
    assert info["embedding_dimension"] == 8 and info["sentence_embedding_dimension"] == 32
    assert info["max_sequence_length"] == 64 and info["condition_required"] is True
    assert info["limits"] == {
        "max_request_bytes": 1 << 20,
        "max_items": 7,
        "max_concurrent": 64,
        "max_text_chars": 99,
        "body_timeout_s": 30.0,
    }
    assert info["batching"]["max_batch_inputs"] == 3 and info["auth"] is False
    with serving(scorers["cross"]) as client:
        info = client.get("/info").json()
    assert info["embedding_dimension"] is None and info["max_sequence_length"] == 48
    with serving(scorers["bi"], model=str(saved_models["bi"])) as client:
        info = client.get("/info").json()
    assert info["resolved_model"] == str(saved_models["bi"]) and info["embedding_dimension"] == 32
    # what scores, with how many threads, under which package versions
    import sentence_transformers
    import torch

    assert info["scorer"] == "bi-encoder, torch on cpu" and info["torch_threads"] == torch.get_num_threads()
    assert info["versions"]["sentence-transformers"] == sentence_transformers.__version__
    assert info["versions"]["torch"] == torch.__version__


def test_errors_of_the_framework_have_the_shape(scorers) -> None:  # noqa: F811
    with serving(scorers["bi"]) as client:
        assert_error(client.get("/nowhere"), 404, "NotFound")
        assert_error(client.get("/similarity"), 405, "MethodNotAllowed")
        bad_json = client.post("/similarity", content=b"{not json", headers={"Content-Type": "application/json"})
        assert_error(bad_json, 422, "Validation", contains="not valid JSON")
        # bodies FastAPI cannot decode at all: 422 saying why (was 400 "Unsupported")
        json_type = {"Content-Type": "application/json"}
        not_utf8 = client.post("/similarity", content=b'{"sentence1": "\xff\xfe"}', headers=json_type)
        assert_error(not_utf8, 422, "Validation", contains="the body is not valid UTF-8")
        deep = client.post("/similarity", content=b"[" * 100_000 + b"]" * 100_000, headers=json_type)
        assert_error(deep, 422, "Validation", contains="nested too deeply")  # 200 KB: under --max-request-bytes
        # curl -d without -H: form-encoded, so FastAPI reads no JSON object; the answer says to send JSON
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        body = b'{"sentence1": "a", "sentence2": "b", "condition": "c"}'
        answer = client.post("/similarity", content=body, headers=form)
        assert_error(answer, 422, "Validation", contains="the request's Content-Type is 'application/x-www-form-url")
        assert "'Content-Type: application/json'" in answer.json()["error"]
        assert "Content-Type" not in client.post("/similarity", json={"sentence1": "a"}).json()["error"]
