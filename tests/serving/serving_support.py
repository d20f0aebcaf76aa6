"""What the server tests share: tiny saved models of every type, a ready test client, a gate that holds the model,
and a time limit on every test (no test may hang).

Not a ``conftest.py``: the suite's tests import ``conftest`` by name (the root one), which a second conftest module
would shadow. Test modules import the fixtures they use from here (``time_limit`` in every module).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

TEST_TIME_LIMIT_S = 120

S1 = ["a man plays guitar", "a dog runs in the park", "a girl eats food", "a man plays guitar"]
S2 = ["a woman plays piano", "a cat sits in the house", "a boy eats food", "a dog runs in the park"]
C = ["the activity", "the animal", "the person", "the animal"]


@pytest.fixture(autouse=True)
def time_limit() -> Iterator[None]:
    """Fail a test that runs longer than ``TEST_TIME_LIMIT_S`` (SIGALRM in the main thread)."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"test ran longer than {TEST_TIME_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_TIME_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def saved_models(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Folders of a tiny bi-, tri- and cross-encoder and CASE model saved by finesim, and a plain
    sentence-transformers folder (no finesim marker)."""
    import torch

    from finesim.case import CaseModel, CaseProjection, ConditionAwareEncoder, PromptFormat
    from finesim.models import load_sentence_model
    from finesim.models.builders import build_bi_encoder, build_cross_encoder, build_tri_encoder
    from finesim.models.io import save_model

    root = tmp_path_factory.mktemp("serving-models")
    torch.manual_seed(0)
    out = {
        "bi": save_model(build_bi_encoder(str(tiny_bert_dir), max_length=32), root / "bi"),
        "tri": save_model(build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=32), root / "tri"),
        "cross": save_model(build_cross_encoder(str(tiny_bert_dir), max_length=48), root / "cross"),
    }
    encoder = ConditionAwareEncoder(
        load_sentence_model(str(tiny_bert_dir), max_length=64), PromptFormat("mlm", "conc_cs")
    )
    encoder.description["model"] = str(tiny_bert_dir)
    out["case"] = CaseModel(encoder, CaseProjection("nonlinear", 32, 8)).save(root / "case")
    plain = load_sentence_model(str(tiny_bert_dir), max_length=32)
    plain.save_pretrained(str(root / "plain"))
    out["plain"] = root / "plain"
    return out


@pytest.fixture(scope="session")
def scorers(saved_models: dict[str, Path]) -> dict[str, Any]:
    """One loaded :class:`ConditionalScorer` per model type (shared: tests that change one use their own)."""
    from finesim.evaluation.scoring import ConditionalScorer

    return {kind: ConditionalScorer(str(path)) for kind, path in saved_models.items() if kind != "plain"}


def wait_until(condition: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


@contextmanager
def serving(loader: Callable[[], Any] | Any, *, ready: bool = True, **settings: Any) -> Iterator[Any]:
    """A FastAPI ``TestClient`` of an app serving what ``loader`` returns (a scorer is wrapped in a loader);
    waits for ``/health`` 200 unless ``ready`` is False."""
    from fastapi.testclient import TestClient

    from finesim.serving import ServeSettings, create_app

    load = loader if callable(loader) else (lambda: loader)
    app = create_app(ServeSettings(model=settings.pop("model", "tiny"), **settings), loader=load)
    with TestClient(app) as client:
        if ready:
            wait_until(lambda: client.get("/health").status_code == 200, what="/health 200")
        yield client


def metric(client: Any, name: str, labels: str = "") -> float:
    """The value of one sample of ``GET /metrics`` (0 when absent)."""
    text = client.get("/metrics").text
    pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" ([0-9.e+-]+)$"
    found = re.search(pattern, text, flags=re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def assert_error(response, status: int, error_type: str, *, contains: str = "") -> dict:
    """The response is an error in the one shape: exactly ``error`` and ``error_type``."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"}, body
    assert body["error_type"] == error_type and isinstance(body["error"], str) and body["error"]
    assert contains in body["error"], body["error"]
    return body


class Gate:
    """Holds the model: the scorer's compute method waits until :meth:`open` (``entered`` is set on the first
    call). Used to keep requests in flight."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.calls = 0

    def wrap(self, scorer: Any, method: str = "embed") -> Any:
        original = getattr(scorer, method)

        def held(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            self.entered.set()
            if not self.released.wait(60):
                raise TimeoutError("the gate was never opened")
            return original(*args, **kwargs)

        setattr(scorer, method, held)
        return scorer

    def open(self) -> None:
        self.released.set()


@pytest.fixture()
def fresh_bi(saved_models: dict[str, Path]) -> Any:
    """A bi-encoder scorer of this test only (safe to wrap)."""
    from finesim.evaluation.scoring import ConditionalScorer

    return ConditionalScorer(str(saved_models["bi"]))
