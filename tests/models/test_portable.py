"""Saved folders that load without finesim: a tri-encoder's head code saved inside the folder
(:mod:`finesim.models.portable`), plain sentence-transformers loading bi- and tri-encoder folders with the scores
finesim gives, folders saved before the change still loading in finesim, and an isolated interpreter without finesim
scoring them."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from finesim.evaluation.scoring import ConditionalScorer
from finesim.models.builders import build_bi_encoder, build_tri_encoder
from finesim.models.io import load_conditional_model, save_model
from finesim.models.portable import MODULE_CLASSES, make_portable, portable_source

S1 = ["a man plays guitar", "a dog runs in the park", "the cat eats food", "a girl walks on the street"]
S2 = ["a woman plays piano", "a cat sits in the house", "the dog eats", "two boys sit in the park"]
C = ["the activity", "the animal", "the food", "the number of people"]
ATOL = 1e-5


def _modules(folder: Path) -> list[dict]:
    return json.loads((folder / "modules.json").read_text(encoding="utf-8"))


def _imports(source: str) -> list[tuple[str, int]]:
    """``(module, level)`` of every import in ``source`` (level > 0: relative)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", node.level))
    return out


def _is_finesim(module: str) -> bool:
    return module == "finesim" or module.startswith("finesim.")


def _plain_tri(folder: Path):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), trust_remote_code=True)
    heads = [m for m in model if type(m).__name__ == "ConditionHead"]
    assert len(heads) == 1 and type(heads[0]).__module__.startswith("transformers_modules.")  # the folder's copy
    return model, heads[0]


@pytest.fixture(scope="module")
def tri_dirs(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tri-encoder folder per head kind (hypernet with the sentence transform, concat with a CCL projection head
    after the condition head)."""
    from finesim.models.projection_head import add_projection_head

    root = tmp_path_factory.mktemp("tri")
    out = {}
    for kind in ("hadamard", "concat", "hypernet"):
        model = build_tri_encoder(str(tiny_bert_dir), head=kind, transform=kind == "hypernet", max_length=64)
        if kind == "concat":
            add_projection_head(model, seed=1)
        out[kind] = save_model(model, root / kind)
    return out


def test_a_tri_encoder_folder_holds_its_head_code_and_names_it(tri_dirs: dict[str, Path]) -> None:
    folder = tri_dirs["concat"]
    types = [m["type"] for m in _modules(folder)]
    assert types[2:] == ["finesim_condition_head.ConditionHead", "finesim_projection_head.ProjectionHead"]
    assert not any(t.startswith("finesim.") for t in types)
    files = sorted(p.name for p in folder.glob("*.py"))
    assert files == ["finesim_condition_head.py", "finesim_head_module.py", "finesim_projection_head.py"]
    for name in files:
        for module, level in _imports((folder / name).read_text(encoding="utf-8")):
            assert level or not _is_finesim(module), f"{name} imports {module}"
            if level:  # a relative import names a file saved beside it
                assert (folder / f"{module}.py").is_file(), f"{name} imports .{module}, which is not in the folder"
            else:
                assert module.split(".")[0] in ("__future__", "collections", "typing", "torch", "sentence_transformers")


def test_every_finesim_module_class_can_be_copied_self_contained() -> None:
    for cls in MODULE_CLASSES:
        source, needed = portable_source(cls.__module__)
        assert cls.__qualname__ in source
        assert not [m for m, level in _imports(source) if _is_finesim(m) and not level], cls
        for module in needed:  # what it imports from finesim is copied too, and is self-contained
            assert not [m for m, level in _imports(portable_source(module)[0]) if _is_finesim(m) and not level]


def test_plain_sentence_transformers_scores_a_tri_encoder_like_finesim(tri_dirs: dict[str, Path]) -> None:
    for kind, folder in tri_dirs.items():
        expected = ConditionalScorer(str(folder)).score(S1, S2, C)
        model, head = _plain_tri(folder)
        np.testing.assert_allclose(head.similarity(model, S1, S2, C).numpy(), expected, atol=ATOL, err_msg=kind)
        # the conditional embeddings, and one condition string for every sentence
        finesim_embed = ConditionalScorer(str(folder)).embed(S1, [C[0]] * len(S1)).numpy()
        np.testing.assert_allclose(head.embed(model, S1, C[0]).numpy(), finesim_embed, atol=ATOL, err_msg=kind)


def test_plain_encode_of_a_tri_encoder_is_the_unfused_embedding(tri_dirs: dict[str, Path]) -> None:
    """What the card and the head's docstring say: ``model.encode(texts)`` passes each text through the head
    unfused (it is the input of the fusion), so it is not a conditional embedding."""
    folder = tri_dirs["hadamard"]
    model, head = _plain_tri(folder)
    without_head = load_conditional_model(folder)
    del without_head[2]
    np.testing.assert_allclose(model.encode(S1), without_head.encode(S1), atol=ATOL)
    assert not np.allclose(model.encode(S1), head.embed(model, S1, C).numpy(), atol=1e-3)
    with pytest.raises(ValueError, match="4 sentences but 2 conditions"):
        head.embed(model, S1, C[:2])


def test_plain_sentence_transformers_asks_for_trust_remote_code(tri_dirs: dict[str, Path]) -> None:
    from sentence_transformers import SentenceTransformer

    with pytest.raises(ValueError, match="trust_remote_code=True"):
        SentenceTransformer(str(tri_dirs["hadamard"]))


def test_a_bi_encoder_folder_is_a_plain_sentence_transformers_folder(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    folder = save_model(build_bi_encoder(str(tiny_bert_dir), transform=True, max_length=64), tmp_path / "bi")
    assert all(m["type"].startswith("sentence_transformers.") for m in _modules(folder))
    assert not list(folder.glob("*.py"))
    plain = SentenceTransformer(str(folder))  # no trust_remote_code
    a = plain.encode(list(zip(S1, C)), convert_to_tensor=True)
    b = plain.encode(list(zip(S2, C)), convert_to_tensor=True)
    scores = plain.similarity_pairwise(a, b).numpy()
    np.testing.assert_allclose(scores, ConditionalScorer(str(folder)).score(S1, S2, C), atol=ATOL)


def test_a_bi_encoder_with_finesim_heads_loads_with_their_code(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """CCL's projection head and the STS regression head stay in a saved bi-encoder: their code travels too."""
    from sentence_transformers import SentenceTransformer

    from finesim.models.projection_head import add_projection_head
    from finesim.models.regression_head import add_regression_head

    model = build_bi_encoder(str(tiny_bert_dir), max_length=64)
    add_regression_head(model, seed=0)
    add_projection_head(model, seed=0)
    folder = save_model(model, tmp_path / "bi-heads", encoder="bi")
    assert sorted(p.name for p in folder.glob("*.py")) == [
        "finesim_head_module.py",
        "finesim_projection_head.py",
        "finesim_regression_head.py",
    ]
    plain = SentenceTransformer(str(folder), trust_remote_code=True)
    expected = load_conditional_model(folder).encode(list(zip(S1, C)))
    np.testing.assert_allclose(plain.encode(list(zip(S1, C))), expected, atol=ATOL)


def test_a_prompt_based_decoder_folder_loads_with_its_code(tiny_causal_lm_dir: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from finesim.models.builders import build_prompt_lm

    model = build_prompt_lm(str(tiny_causal_lm_dir), max_length=32, template="eol")
    folder = save_model(model, tmp_path / "lm", encoder="bi")
    assert _modules(folder)[0]["type"] == "finesim_prompt_transformer.PromptTransformer"
    plain = SentenceTransformer(str(folder), trust_remote_code=True)
    assert type(plain[0]).__name__ == "PromptTransformer" and plain[0].template == "eol"
    np.testing.assert_allclose(plain.encode(S1), model.encode(S1), atol=ATOL)


def test_folders_saved_before_still_load_in_finesim_and_can_be_made_portable(
    tri_dirs: dict[str, Path], tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(tri_dirs["hypernet"], tmp_path / "old"))
    expected = ConditionalScorer(str(folder)).score(S1, S2, C)
    # the layout of a folder saved before: finesim's class names, no code in the folder
    modules = _modules(folder)
    modules[2]["type"] = "finesim.models.condition_head.ConditionHead"
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    for path in folder.glob("*.py"):
        path.unlink()
    np.testing.assert_allclose(ConditionalScorer(str(folder)).score(S1, S2, C), expected, atol=ATOL)
    # make_portable brings it up to date; running it again changes nothing
    assert make_portable(folder) == ["finesim_condition_head.py", "finesim_head_module.py"]
    assert _modules(folder)[2]["type"] == "finesim_condition_head.ConditionHead"
    assert make_portable(folder) == ["finesim_condition_head.py", "finesim_head_module.py"]
    model, head = _plain_tri(folder)
    np.testing.assert_allclose(head.similarity(model, S1, S2, C).numpy(), expected, atol=ATOL)
    np.testing.assert_allclose(ConditionalScorer(str(folder)).score(S1, S2, C), expected, atol=ATOL)


def test_finesim_never_runs_the_code_saved_in_a_folder(tri_dirs: dict[str, Path], tmp_path: Path) -> None:
    folder = Path(shutil.copytree(tri_dirs["hadamard"], tmp_path / "tampered"))
    (folder / "finesim_condition_head.py").write_text("raise RuntimeError('folder code ran')\n", encoding="utf-8")
    model = load_conditional_model(folder)
    assert type(model[2]).__module__ == "finesim.models.condition_head"


# ---------------------------------------------------------------- without finesim installed

PLAIN_SCRIPT = """
import importlib.util
import json
import sys

site, spec = sys.argv[1], json.loads(sys.argv[2])
sys.path.append(site)
assert importlib.util.find_spec("finesim") is None, "finesim is importable: the check is not isolated"

import torch
from sentence_transformers import SentenceTransformer

s1, s2, c = spec["s1"], spec["s2"], spec["c"]
scores = {}
for name, folder in spec["folders"].items():
    if name == "bi":  # a plain sentence-transformers folder: no trust_remote_code
        model = SentenceTransformer(folder)
        a = model.encode(list(zip(s1, c)), convert_to_tensor=True)
        b = model.encode(list(zip(s2, c)), convert_to_tensor=True)
        scores[name] = torch.nn.functional.cosine_similarity(a, b).tolist()
    elif name == "old":  # a folder saved before: it names finesim's class, which cannot be imported here
        try:
            SentenceTransformer(folder, trust_remote_code=True)
            scores[name] = "loaded"
        except Exception as err:
            scores[name] = f"{type(err).__name__}: {err}"
    else:
        model = SentenceTransformer(folder, trust_remote_code=True)
        head = next(m for m in model if type(m).__name__ == "ConditionHead")
        scores[name] = head.similarity(model, s1, s2, c).tolist()
loaded = sorted(m for m in sys.modules if m == "finesim" or m.startswith("finesim."))
print(json.dumps({"scores": scores, "finesim_modules": loaded}))
"""


def _site_without_finesim(target: Path) -> Path:
    """A folder of links to every entry of the site-packages holding sentence-transformers, except finesim's own
    (its package or dist-info, its editable-install finder, and every ``.pth`` file: the editable install is one)."""
    import sentence_transformers

    site = Path(sentence_transformers.__file__).resolve().parents[1]
    target.mkdir()
    for entry in site.iterdir():
        if "finesim" in entry.name.lower() or entry.suffix == ".pth":
            continue
        (target / entry.name).symlink_to(entry)
    return target


@pytest.mark.slow
def test_saved_folders_score_in_sentence_transformers_without_finesim(
    tiny_bert_dir: Path, tri_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """A bi- and tri-encoder folders load and score in an interpreter where finesim cannot be imported.

    The isolation: ``python -I -S`` ignores every ``PYTHON*`` variable, the user site, the script's folder and the
    current folder (``-I``), and does not process site-packages at all (``-S``: no ``.pth`` file runs, and finesim
    is installed in editable mode by one). The script then adds to ``sys.path`` one folder of links to the entries
    of the environment's site-packages minus finesim's (:func:`_site_without_finesim`), and first asserts that
    ``finesim`` cannot be found. This is the environment a fresh venv with ``pip install sentence-transformers``
    gives (the same torch, transformers and sentence-transformers, finesim absent), without installing anything:
    fast, offline and reliable. The dynamic-module cache of transformers goes to a scratch folder.
    """
    folders = {"bi": save_model(build_bi_encoder(str(tiny_bert_dir), max_length=64), tmp_path / "bi")}
    folders.update({f"tri-{kind}": path for kind, path in tri_dirs.items()})
    expected = {name: ConditionalScorer(str(path)).score(S1, S2, C) for name, path in folders.items()}
    # the control: a tri-encoder in the layout saved before (finesim's class name, no code) must fail there
    old = Path(shutil.copytree(tri_dirs["hadamard"], tmp_path / "old"))
    modules = _modules(old)
    modules[2]["type"] = "finesim.models.condition_head.ConditionHead"
    (old / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    site = _site_without_finesim(tmp_path / "site")
    script = tmp_path / "plain.py"
    script.write_text(PLAIN_SCRIPT, encoding="utf-8")
    spec = {"s1": S1, "s2": S2, "c": C, "folders": {name: str(path) for name, path in {**folders, "old": old}.items()}}
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_MODULES_CACHE": str(tmp_path / "hf-modules"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(script), str(site), json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["finesim_modules"] == []
    assert result["scores"].pop("old").startswith("ModuleNotFoundError: No module named 'finesim'")
    assert sorted(result["scores"]) == sorted(expected)
    for name, scores in result["scores"].items():
        np.testing.assert_allclose(scores, expected[name], atol=ATOL, err_msg=name)
