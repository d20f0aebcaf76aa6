"""``finesim score --ray`` without a Ray cluster: the missing extra and bad options are one error line, and
:class:`~finesim.evaluation.ray_scoring.RayScorer`'s slicing (over an in-process stand-in for Ray) gives the
single-process output row for row. The real Ray runs are in tests/index/test_ray_distributed.py (slow)."""

from __future__ import annotations

import csv
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from finesim.cli.main import main

S1 = ["a man plays guitar", "a dog runs in the park", "a girl eats food", "two boys sit", "a red car", "a cat"]
S2 = ["a woman plays piano", "a cat sits in the house", "a boy eats food", "a girl walks", "a blue car", "a dog"]
C = ["the activity", "the animal", "the person", "the number", "the color", "the animal"]


def _pairs(path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "sentence1", "sentence2", "condition"])
        writer.writerows([[str(i), a, b, c] for i, (a, b, c) in enumerate(zip(S1, S2, C))])
        writer.writerow(["6", "", "an empty first text", "the animal"])
    return path


@pytest.fixture()
def bi_folder(tiny_bert_dir: Path, tmp_path: Path) -> Path:
    from finesim.models.builders import build_bi_encoder
    from finesim.models.io import save_model

    return save_model(build_bi_encoder(str(tiny_bert_dir), max_length=32), tmp_path / "bi", encoder="bi")


def test_without_ray_installed_the_error_names_the_extra(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    out = tmp_path / "out.csv"
    argv = ["score", "--model", "minilm", "--input", str(_pairs(tmp_path / "in.csv")), "--output", str(out)]
    assert main([*argv, "--ray"]) == 1
    err = capsys.readouterr().err
    assert "finesim score: error: --ray needs Ray Data: pip install 'finesim[ray]'" in err
    assert "Traceback" not in err and not out.exists()
    assert main([*argv, "--ray-address", "ray://nowhere:10001"]) == 1  # an address implies --ray
    assert "pip install 'finesim[ray]'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--ray-workers", "2"], "--ray-workers needs --ray (or --ray-address)"),
        (["--ray", "--ray-workers", "0"], "--ray-workers: must be >= 1, got 0"),
    ],
)
def test_bad_ray_options_are_usage_errors(extra, says, tmp_path, capsys) -> None:
    argv = ["score", "--model", "minilm", "--input", str(_pairs(tmp_path / "in.csv"))]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--output", str(tmp_path / "out.csv"), *extra])
    assert exit_.value.code == 2 and says in capsys.readouterr().err


class _Method:
    def __init__(self, bound) -> None:
        self.remote = bound


class _Handle:
    """An actor handle whose method calls run at once in this process (``.remote`` returns the result)."""

    def __init__(self, actor) -> None:
        self.actor = actor

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self.actor, name))


def fake_ray(cpus: int, calls: list[int]) -> types.SimpleNamespace:
    """The part of ``ray`` that RayScorer uses, in process; ``calls`` records the rows each score call gets."""
    import torch

    def remote(**resources):
        def wrap(cls):
            class Scoring(cls):
                def score(self, s1, s2, conditions):
                    calls.append(len(s1))
                    return super().score(s1, s2, conditions)

            return types.SimpleNamespace(remote=lambda *args: _Handle(Scoring(*args)))

        return wrap

    threads = {"CPU": torch.get_num_threads()}  # the actor sets torch threads from this: keep the test's own
    context = types.SimpleNamespace(get_assigned_resources=lambda: threads)
    return types.SimpleNamespace(
        cluster_resources=lambda: {"CPU": cpus},
        remote=remote,
        get=lambda refs: list(refs),
        kill=lambda actor: None,
        get_runtime_context=lambda: context,
        exceptions=types.SimpleNamespace(RayError=RuntimeError),
    )


def test_ray_scorer_slices_give_the_single_process_output(bi_folder, monkeypatch, tmp_path) -> None:
    from finesim.evaluation.loading import load_scorer
    from finesim.evaluation.ray_scoring import RayScorer
    from finesim.evaluation.score_file import score_file

    calls: list[int] = []
    ray = fake_ray(cpus=4, calls=calls)
    monkeypatch.setitem(sys.modules, "ray", ray)
    table = _pairs(tmp_path / "in.csv")
    options = {"chunk_rows": 4, "skip_bad_rows": True}
    with RayScorer(ray, bi_folder, workers=3) as scorer:
        assert (scorer.encoder, scorer.requires_condition, scorer.workers) == ("bi", False, 3)
        ours = score_file(scorer, table, tmp_path / "ray.csv", **options)
    theirs = score_file(load_scorer(str(bi_folder)), table, tmp_path / "local.csv", **options)
    assert calls == [2, 2, 1, 1]  # chunks of 4 and 2 valid rows (+ 1 rejected): slices of ceil(rows / 3)
    assert (ours["rows_scored"], ours["rows_skipped"]) == (theirs["rows_scored"], theirs["rows_skipped"]) == (6, 1)
    with open(tmp_path / "ray.csv", encoding="utf-8") as a, open(tmp_path / "local.csv", encoding="utf-8") as b:
        mine, reference = list(csv.DictReader(a)), list(csv.DictReader(b))
    assert [{k: v for k, v in r.items() if k != "score"} for r in mine] == [
        {k: v for k, v in r.items() if k != "score"} for r in reference
    ]
    np.testing.assert_allclose([float(r["score"]) for r in mine], [float(r["score"]) for r in reference], atol=1e-6)
    assert (tmp_path / "ray.rejects.jsonl").read_text() == (tmp_path / "local.rejects.jsonl").read_text()


def test_ray_scorer_refuses_failed_loads_mismatched_models_and_too_many_workers(bi_folder, monkeypatch, tmp_path):
    from finesim.evaluation.fingerprint import scorer_fingerprint
    from finesim.evaluation.ray_scoring import RayScorer, WorkerError
    from finesim.index import ModelMismatchError

    ray = fake_ray(cpus=2, calls=[])
    monkeypatch.setitem(sys.modules, "ray", ray)
    with pytest.raises(ValueError, match="3 Ray workers asked for, but the Ray cluster offers 2 CPUs"):
        RayScorer(ray, bi_folder, workers=3)
    with pytest.raises(WorkerError, match=r"could not load the model .*nowhere: .*Error"):
        RayScorer(ray, tmp_path / "nowhere", encoder="tri")
    with RayScorer(ray, bi_folder, workers=2, fingerprint=scorer_fingerprint):  # the same files: the same hash
        pass
    hashes = iter(["a" * 64, "b" * 64])
    with pytest.raises(ModelMismatchError, match="the Ray workers loaded different weights"):
        RayScorer(ray, bi_folder, workers=2, fingerprint=lambda scorer: next(hashes))


def test_ray_scorer_checks_the_weights_hash_by_default(bi_folder, monkeypatch) -> None:
    """A Python caller gets the check the command makes without asking for it; ``fingerprint=False`` is the only way
    to turn it off (None, which used to mean no check, is refused)."""
    import finesim.evaluation.fingerprint as fingerprint
    from finesim.evaluation.loading import load_scorer
    from finesim.evaluation.ray_scoring import RayScorer
    from finesim.index import ModelMismatchError

    ray = fake_ray(cpus=2, calls=[])
    monkeypatch.setitem(sys.modules, "ray", ray)
    expected = fingerprint.scorer_fingerprint(load_scorer(str(bi_folder)))
    assert expected is not None and len(expected) == 64
    with RayScorer(ray, bi_folder, workers=2) as scorer:
        assert scorer.weights_sha256 == expected
    hashes = iter(["a" * 64, "b" * 64])  # two actors that loaded different copies of the model
    monkeypatch.setattr(fingerprint, "scorer_fingerprint", lambda scorer: next(hashes))
    with pytest.raises(ModelMismatchError, match="the Ray workers loaded different weights"):
        RayScorer(ray, bi_folder, workers=2)
    hashes = iter(["a" * 64, "b" * 64])
    with RayScorer(ray, bi_folder, workers=2, fingerprint=False) as scorer:  # explicitly off: no check, no hash
        assert scorer.weights_sha256 is None
    with pytest.raises(ValueError, match=r"fingerprint must be True .* False \(no check\) .* got None"):
        RayScorer(ray, bi_folder, workers=2, fingerprint=None)


def test_ray_scorer_refuses_actors_with_the_same_weights_but_another_tokenizer(bi_folder, monkeypatch) -> None:
    """The default check compares the actors' tokenizer and prompts hashes too (a node whose copy of the model has
    other tokenizer files scores otherwise with the same weights); a check function of the caller's replaces both."""
    import finesim.evaluation.fingerprint as fingerprint
    from finesim.evaluation.ray_scoring import RayScorer
    from finesim.index import ModelMismatchError

    ray = fake_ray(cpus=2, calls=[])
    monkeypatch.setitem(sys.modules, "ray", ray)
    seen = iter([{"tokenizer": "a" * 64, "prompts": "c" * 64}, {"tokenizer": "b" * 64, "prompts": "c" * 64}])
    monkeypatch.setattr(fingerprint, "scorer_inputs_fingerprint", lambda scorer: next(seen))
    with pytest.raises(ModelMismatchError, match=r"same weights but different tokenizer .*\(tokenizer sha256 differ\)"):
        RayScorer(ray, bi_folder, workers=2)
    seen = iter([{"tokenizer": "a" * 64, "prompts": "c" * 64}, {"tokenizer": "b" * 64, "prompts": "c" * 64}])
    with RayScorer(ray, bi_folder, workers=2, fingerprint=fingerprint.scorer_fingerprint):  # the caller's check only
        pass
