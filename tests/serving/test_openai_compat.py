"""What OpenAI clients (the ``openai`` package, LangChain) send and call: unknown fields refused with the right name,
``dimensions`` only as the model's own, token-id input refused saying how to configure the client, ``GET /v1/models``;
and the interactive docs page, on by default on loopback."""

from __future__ import annotations

import numpy as np
import pytest
from serving_support import assert_error, saved_models, scorers, serving, time_limit  # noqa: F401


def test_embeddings_refuse_an_unknown_field_naming_the_right_one(scorers) -> None:  # noqa: F811
    with serving(scorers["bi"]) as client:
        got = client.post("/v1/embeddings", json={"input": "a dog", "conditon": "the animal"})
        body = assert_error(got, 422, "Validation", contains="conditon: Extra inputs are not permitted")
        assert "unknown field (did you mean 'condition'?)" in body["error"]
        assert "the fields are condition, dimensions, encoding_format, input, model, user" in body["error"]
        # the other endpoints say the same, with their own fields
        got = client.post("/similarity", json={"sentence1": ["a"], "sentence2": ["b"], "sentence_2": ["b"]})
        assert_error(got, 422, "Validation", contains="sentence_2: Extra inputs are not permitted: unknown field")
        assert "(did you mean 'sentence2'?)" in got.json()["error"]
        got = client.post("/rerank", json={"query": "a", "texts": ["b"], "topn": 1})
        assert_error(got, 422, "Validation", contains="(did you mean 'top_n'?)")
        # nothing close: no guess, still the fields
        got = client.post("/v1/embeddings", json={"input": "a dog", "xyz": 1})
        body = assert_error(got, 422, "Validation", contains="xyz: Extra inputs are not permitted: unknown field;")
        assert "did you mean" not in body["error"]


def test_embeddings_take_the_openai_fields(scorers) -> None:  # noqa: F811
    """What ``openai`` sends (``encoding_format`` base64 by default, ``user`` when given) is accepted."""
    with serving(scorers["bi"]) as client:
        got = client.post(
            "/v1/embeddings", json={"input": ["a dog"], "model": "x", "encoding_format": "base64", "user": "u-1"}
        )
        assert got.status_code == 200, got.text


def test_dimensions_only_as_the_models_own(scorers) -> None:  # noqa: F811
    with serving(scorers["bi"]) as client:
        got = client.post("/v1/embeddings", json={"input": "a dog", "dimensions": 16})
        body = assert_error(got, 422, "Validation", contains="dimensions is 16")
        assert "this model's embeddings have 32 dimensions" in body["error"] and "Matryoshka" in body["error"]
        assert "leave dimensions out or send 32" in body["error"]
        same = client.post("/v1/embeddings", json={"input": "a dog", "dimensions": 32})
        assert same.status_code == 200, same.text
        plain = client.post("/v1/embeddings", json={"input": "a dog"}).json()
        assert len(same.json()["data"][0]["embedding"]) == 32
        np.testing.assert_allclose(same.json()["data"][0]["embedding"], plain["data"][0]["embedding"])
        for bad in (0, -1, "32", 3.5):
            assert_error(client.post("/v1/embeddings", json={"input": "a", "dimensions": bad}), 422, "Validation")
    with serving(scorers["case"]) as client:  # a CASE model's embeddings are its projection's (8 here)
        got = client.post("/v1/embeddings", json={"input": "a dog", "condition": "the animal", "dimensions": 32})
        assert_error(got, 422, "Validation", contains="this model's embeddings have 8 dimensions")
        got = client.post("/v1/embeddings", json={"input": "a dog", "condition": "the animal", "dimensions": 8})
        assert got.status_code == 200, got.text


@pytest.mark.parametrize("tokens", [[[1820, 374, 264]], [1820, 374, 264], [[1820], [374, 264]]])
def test_token_id_input_says_how_to_configure_the_client(tokens, scorers) -> None:  # noqa: F811
    """LangChain's ``OpenAIEmbeddings`` sends tiktoken ids (lists of ints) by default."""
    with serving(scorers["bi"]) as client:
        got = client.post("/v1/embeddings", json={"input": tokens, "model": "text-embedding-ada-002"})
        body = assert_error(got, 422, "Validation", contains="input: input is token ids")
        assert "send the texts as strings" in body["error"] and "check_embedding_ctx_length=False" in body["error"]
        assert "Value error" not in body["error"]
        # a list mixing strings and numbers is a plain type error
        got = client.post("/v1/embeddings", json={"input": ["a dog", 3]})
        body = assert_error(got, 422, "Validation", contains="input[1]: Input should be a valid string")
        assert "token ids" not in body["error"]


def test_v1_models_lists_the_served_model(scorers) -> None:  # noqa: F811
    with serving(scorers["bi"], model="runs/bi/model") as client:
        got = client.get("/v1/models")
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["object"] == "list" and len(body["data"]) == 1
        entry = body["data"][0]
        assert entry["id"] == "runs/bi/model" and entry["object"] == "model" and entry["owned_by"] == "finesim"
        assert isinstance(entry["created"], int)
        assert client.get("/v1/models/runs/bi/model").json() == entry
        assert_error(client.get("/v1/models/gpt-4"), 404, "NotFound", contains="this server serves 'runs/bi/model'")
    with serving(scorers["bi"], model="m", api_key="secret") as client:  # like every non-public path: the key
        assert_error(client.get("/v1/models"), 401, "Unauthorized")
        assert client.get("/v1/models", headers={"Authorization": "Bearer secret"}).json()["data"][0]["id"] == "m"


def test_docs_page_is_on_by_default_on_loopback(scorers) -> None:  # noqa: F811
    for host in ("127.0.0.1", "localhost", "::1"):
        with serving(scorers["bi"], host=host) as client:
            assert client.get("/docs").status_code == 200, host
            assert client.get("/openapi.json").json()["paths"]["/v1/models"]
    with serving(scorers["bi"], host="0.0.0.0") as client:
        assert_error(client.get("/docs"), 404, "NotFound")
    with serving(scorers["bi"], host="0.0.0.0", docs=True) as client:
        assert client.get("/docs").status_code == 200
    with serving(scorers["bi"], docs=False) as client:
        assert_error(client.get("/docs"), 404, "NotFound")
    with serving(scorers["bi"], api_key="secret") as client:  # the page works in a browser; scoring needs the key
        assert client.get("/docs").status_code == 200 and client.get("/openapi.json").status_code == 200
        assert_error(client.post("/similarity", json={"sentence1": ["a"], "sentence2": ["b"]}), 401, "Unauthorized")
    with serving(scorers["bi"], api_key="secret", host="0.0.0.0") as client:
        assert_error(client.get("/openapi.json"), 401, "Unauthorized")  # docs off: the schema stays behind the key


def test_the_command_line_turns_the_docs_on_and_off() -> None:
    from finesim.cli.main import build_parser

    parse = build_parser().parse_args
    assert parse(["serve", "--model", "m"]).docs is None
    assert parse(["serve", "--model", "m", "--docs"]).docs is True
    assert parse(["serve", "--model", "m", "--no-docs"]).docs is False
