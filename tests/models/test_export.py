"""finesim export: export -> reload -> the same scores as the torch path (bi, tri, cross; ONNX fp32 / int8, torch
int8 / bf16), the loader's refusal of a missing or corrupt runtime file, unsupported models, and the command."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from finesim.evaluation.scoring import ConditionalScorer
from finesim.models.export import export_model
from finesim.models.io import load_conditional_model, load_sentence_model, read_marker, save_model
from finesim.models.runtime import ExportedModelError

S1 = ["a man plays guitar", "a dog runs in the park", "the cat eats food", "a girl walks on the street"]
S2 = ["a woman plays piano", "a cat sits in the house", "the dog eats", "two boys sit in the park"]
C = ["the activity", "the animal", "the food", "the number of people"]
FP32_ATOL = 1e-5  # cosine scores of the fp32 ONNX export vs torch
INT8_ATOL = 0.05  # int8 weights: a looser bound


@pytest.fixture(scope="module")
def bi_dir(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bi-encoder folder saved by finesim (marker encoder bi) over the tiny BERT."""
    return save_model(load_sentence_model(str(tiny_bert_dir), max_length=64), tmp_path_factory.mktemp("bi") / "m")


@pytest.fixture(scope="module")
def torch_scores(bi_dir: Path) -> np.ndarray:
    return ConditionalScorer(str(bi_dir)).score(S1, S2, C)


@pytest.fixture(scope="module")
def onnx_fp32(bi_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_model(str(bi_dir), tmp_path_factory.mktemp("x") / "fp32", quantize="none").path


def test_onnx_fp32_export_scores_like_torch(bi_dir: Path, onnx_fp32: Path, torch_scores: np.ndarray) -> None:
    marker = read_marker(onnx_fp32)
    assert marker["encoder"] == "bi"
    assert "model_type" not in json.loads((onnx_fp32 / "finesim_model.json").read_text())  # encoder is the one key
    runtime = marker["runtime"]
    assert (runtime["format"], runtime["quantize"], runtime["file"]) == ("onnx", "none", "onnx/model.onnx")
    assert runtime["inputs"] == ["input_ids", "token_type_ids", "attention_mask"]
    assert runtime["bytes"] == (onnx_fp32 / "onnx/model.onnx").stat().st_size
    assert runtime["check"]["max_abs_diff"] < 1e-4
    # the sentence-transformers files stay (tokenizer, config, pooling), not the transformer's torch weights
    for name in ("modules.json", "config.json", "tokenizer.json", "1_Pooling/config.json"):
        assert (onnx_fp32 / name).is_file(), name
    assert not list(onnx_fp32.glob("*.safetensors")) and not list(onnx_fp32.glob("*.bin"))
    from finesim.results import current_umask

    assert onnx_fp32.stat().st_mode & 0o777 == 0o777 & ~current_umask()  # a plain folder, not mkdtemp's private one
    scorer = ConditionalScorer(str(onnx_fp32))
    assert scorer.model.finesim_runtime == {"format": "onnx", "quantize": "none", "sha256": runtime["sha256"]}
    np.testing.assert_allclose(scorer.score(S1, S2, C), torch_scores, atol=FP32_ATOL)
    # unconditional pairs go through the same runtime
    plain = ConditionalScorer(str(bi_dir)).score(S1, S2)
    np.testing.assert_allclose(scorer.score(S1, S2), plain, atol=FP32_ATOL)


def test_an_onnx_export_has_one_fingerprint_and_its_index_reopens(
    bi_dir: Path, onnx_fp32: Path, tmp_path: Path
) -> None:
    """The transformer of an ONNX export is uninitialised torch storage: hashing it gave every load another weights
    hash, so an index built with the export could not be opened again. The fingerprint hashes the runtime file's
    recorded SHA-256 instead: stable over loads, and unlike the torch model's or another export's."""
    from finesim.evaluation.fingerprint import model_fingerprint
    from finesim.index import ConditionalIndex

    first, second = (model_fingerprint(load_conditional_model(str(onnx_fp32))) for _ in range(2))
    assert first == second
    assert first != model_fingerprint(load_conditional_model(str(bi_dir)))
    other = export_model(str(bi_dir), tmp_path / "int8", quantize="int8").path
    assert model_fingerprint(load_conditional_model(str(other))) != first
    index = ConditionalIndex.build(str(onnx_fp32), S1 + S2, tmp_path / "index")
    reopened = ConditionalIndex.open(tmp_path / "index", model=str(onnx_fp32))
    assert [int(r) for r in reopened.search_rows(S1[0], C[0], 3)[0]] == [
        int(r) for r in index.search_rows(S1[0], C[0], 3)[0]
    ]


def test_load_scorer_and_evaluate_path_pick_the_runtime(onnx_fp32: Path, torch_scores: np.ndarray) -> None:
    from finesim.evaluation.loading import load_scorer

    scorer = load_scorer(str(onnx_fp32))
    assert isinstance(scorer, ConditionalScorer) and scorer.model.finesim_runtime["format"] == "onnx"
    np.testing.assert_allclose(scorer.score(S1, S2, C), torch_scores, atol=FP32_ATOL)
    # an ONNX export keeps no torch weights: loading it without its runtime says where the torch model is
    with pytest.raises(ValueError, match=r"keeps no torch weights .* load the model it was exported from \(/"):
        load_conditional_model(onnx_fp32, runtime=False)
    with pytest.raises(ValueError, match=r"keeps no torch weights"):  # e.g. named as a CASE model's encoder
        load_sentence_model(str(onnx_fp32))


@pytest.mark.parametrize(("fmt", "quantize"), [("onnx", "int8"), ("torch", "int8"), ("torch", "bf16")])
def test_quantized_exports_score_close_to_torch(
    bi_dir: Path, torch_scores: np.ndarray, tmp_path: Path, fmt: str, quantize: str
) -> None:
    result = export_model(str(bi_dir), tmp_path / "q", format=fmt, quantize=quantize)
    runtime = read_marker(result.path)["runtime"]
    assert (runtime["format"], runtime["quantize"]) == (fmt, quantize)
    assert (result.path / "onnx").is_dir() == (fmt == "onnx")
    if fmt == "onnx":
        assert runtime["file"] == "onnx/model_int8.onnx" and not (result.path / "onnx/model.onnx").exists()
    assert runtime["check"]["min_cosine"] > 0.9
    scores = ConditionalScorer(str(result.path)).score(S1, S2, C)
    np.testing.assert_allclose(scores, torch_scores, atol=INT8_ATOL)
    # the transformer's torch weights stay only where the runtime reads them (torch int8 / bf16 at load)
    assert (result.path / "model.safetensors").is_file() == (fmt == "torch")
    if fmt == "torch":  # plain sentence-transformers loads them (fp32, ignoring the runtime)
        from sentence_transformers import SentenceTransformer

        plain = SentenceTransformer(str(result.path))
        np.testing.assert_allclose(plain.encode(S1), load_sentence_model(str(bi_dir)).encode(S1), atol=FP32_ATOL)


def test_an_onnx_int8_export_is_the_onnx_file_and_small_files(bi_dir: Path, tmp_path: Path) -> None:
    """The int8 export keeps no torch weights beside the ONNX file: what loading it needs is the ONNX file, the
    tokenizer and the configs (and the weights of any module after the transformer)."""
    result = export_model(str(bi_dir), tmp_path / "int8", quantize="int8")
    files = {p.relative_to(result.path).as_posix(): p.stat().st_size for p in result.path.rglob("*") if p.is_file()}
    assert sorted(files) == [
        "1_Pooling/config.json",
        "README.md",
        "config.json",
        "config_sentence_transformers.json",
        "finesim_model.json",
        "modules.json",
        "onnx/model_int8.onnx",
        "sentence_bert_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert sum(files.values()) - files["onnx/model_int8.onnx"] < 64 * 1024  # tokenizer, configs, card, marker
    model = load_conditional_model(result.path)
    assert type(model[0]).__name__ == "ExportedTransformer" and model.finesim_runtime["format"] == "onnx"


def test_bf16_without_a_format_picks_torch_and_says_so(bi_dir: Path, torch_scores: np.ndarray, tmp_path: Path) -> None:
    said: list[str] = []
    result = export_model(str(bi_dir), tmp_path / "bf16", quantize="bf16", progress=said.append)
    assert (result.runtime["format"], result.runtime["quantize"]) == ("torch", "bf16")
    assert said[0].startswith("--quantize bf16 runs in torch (ONNX Runtime's CPU kernels are fp32 and int8)")
    assert said[0].endswith(": using --format torch")
    np.testing.assert_allclose(ConditionalScorer(str(result.path)).score(S1, S2, C), torch_scores, atol=INT8_ATOL)


def test_tri_encoder_export_runs_the_head_in_torch(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from finesim.models.builders import build_tri_encoder

    tri = save_model(build_tri_encoder(str(tiny_bert_dir), head="concat", max_length=64), tmp_path / "tri")
    expected = ConditionalScorer(str(tri)).score(S1, S2, C)
    result = export_model(str(tri), tmp_path / "tri-onnx", quantize="none")
    assert read_marker(result.path)["encoder"] == "tri"
    scorer = ConditionalScorer(str(result.path))
    assert scorer.encoder == "tri"
    np.testing.assert_allclose(scorer.score(S1, S2, C), expected, atol=FP32_ATOL)


@pytest.mark.parametrize("head", ["linear", "sequence-classification"])
def test_cross_encoder_export_scores_like_torch(tiny_bert_dir: Path, tmp_path: Path, head: str) -> None:
    from finesim.models.builders import build_cross_encoder

    cross = save_model(build_cross_encoder(str(tiny_bert_dir), head=head, max_length=64), tmp_path / "cross")
    expected = ConditionalScorer(str(cross)).score(S1, S2, C)
    result = export_model(str(cross), tmp_path / "cross-onnx", quantize="none")
    runtime = read_marker(result.path)["runtime"]
    assert runtime["output"] == ("logits" if head == "sequence-classification" else "last_hidden_state")
    scorer = ConditionalScorer(str(result.path))
    assert scorer.encoder == "cross"
    np.testing.assert_allclose(scorer.score(S1, S2, C), expected, atol=FP32_ATOL)


def test_a_plain_sentence_transformers_folder_exports_as_a_bi_encoder(tiny_model, tmp_path: Path) -> None:
    tiny_model.save_pretrained(str(tmp_path / "plain"))
    expected = ConditionalScorer(str(tmp_path / "plain")).score(S1, S2, C)
    result = export_model(str(tmp_path / "plain"), tmp_path / "out", quantize="none")
    assert read_marker(result.path)["encoder"] == "bi" and result.encoder == "bi"
    np.testing.assert_allclose(ConditionalScorer(str(result.path)).score(S1, S2, C), expected, atol=FP32_ATOL)


# ---------------------------------------------------------------- refusals


@pytest.fixture()
def damaged(onnx_fp32: Path, tmp_path: Path) -> Path:
    """A private copy of the fp32 export to break."""
    return Path(shutil.copytree(onnx_fp32, tmp_path / "copy"))


def test_loader_refuses_a_missing_runtime_file(damaged: Path) -> None:
    (damaged / "onnx/model.onnx").unlink()
    with pytest.raises(
        ExportedModelError, match=r"model\.onnx is missing.*finesim_model\.json.*export the model again"
    ):
        ConditionalScorer(str(damaged))


def test_loader_refuses_a_truncated_or_altered_file(damaged: Path) -> None:
    path = damaged / "onnx/model.onnx"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ExportedModelError, match=r"model\.onnx is corrupt: \d+ bytes, \d+ were written"):
        ConditionalScorer(str(damaged))
    path.write_bytes(data[:-8] + b"\x00" * 8)  # same size, other bytes
    with pytest.raises(ExportedModelError, match="SHA-256 differs"):
        load_conditional_model(damaged)


def test_loader_refuses_a_file_onnx_runtime_cannot_read(damaged: Path) -> None:
    from finesim.results import file_sha256

    path = damaged / "onnx/model.onnx"
    path.write_bytes(b"not an onnx model")
    marker = json.loads((damaged / "finesim_model.json").read_text())
    marker["runtime"].update(bytes=path.stat().st_size, sha256=file_sha256(path))  # consistent, still unreadable
    (damaged / "finesim_model.json").write_text(json.dumps(marker))
    with pytest.raises(ExportedModelError, match=r"ONNX Runtime cannot load it \(.*\); export the model again"):
        ConditionalScorer(str(damaged))


def test_loader_refuses_a_file_outside_the_folder_and_another_device(damaged: Path) -> None:
    marker = json.loads((damaged / "finesim_model.json").read_text())
    marker["runtime"]["file"] = "../elsewhere.onnx"
    (damaged / "finesim_model.json").write_text(json.dumps(marker))
    with pytest.raises(ExportedModelError, match="outside the model folder"):
        ConditionalScorer(str(damaged))
    with pytest.raises(ValueError, match="exported for the CPU"):
        load_conditional_model(damaged, device="cuda")


def test_export_refuses_unsupported_models_and_options(bi_dir: Path, tmp_path: Path) -> None:
    case = tmp_path / "case"
    case.mkdir()
    (case / "finesim_model.json").write_text(json.dumps({"model_type": "case"}))
    with pytest.raises(ValueError, match=r"is a CASE model: finesim export supports bi-, tri- and cross-encoders"):
        export_model(str(case), tmp_path / "out")
    with pytest.raises(ValueError, match=r"--format onnx does not support --quantize bf16; supported: onnx with"):
        export_model(str(bi_dir), tmp_path / "out", quantize="bf16", format="onnx")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="not empty; pass --overwrite"):
        export_model(str(bi_dir), tmp_path / "full", quantize="none")
    assert (tmp_path / "full" / "keep.txt").is_file()
    with pytest.raises(ValueError, match="source model's folder"):
        export_model(str(bi_dir), bi_dir, quantize="none", overwrite=True)
    # --to the folder above the source with --overwrite deleted the source with it
    with pytest.raises(ValueError, match=r"holds the source model \(.*\); export into a folder outside it"):
        export_model(str(bi_dir), bi_dir.parent, quantize="none", overwrite=True)
    assert (bi_dir / "finesim_model.json").is_file()
    assert not list(tmp_path.glob(".*.export"))  # no half-written folder left behind


def test_an_onnx_export_cannot_be_exported_again_and_names_its_source(
    bi_dir: Path, onnx_fp32: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=rf"keeps no torch weights .*exported from \({bi_dir}\)"):
        export_model(str(onnx_fp32), tmp_path / "again", quantize="int8")
    assert not (tmp_path / "again").exists()


def test_export_refuses_prompt_based_decoders(tiny_causal_lm_dir: Path, tmp_path: Path) -> None:
    from finesim.models.builders import build_prompt_lm

    folder = save_model(build_prompt_lm(str(tiny_causal_lm_dir), max_length=32), tmp_path / "lm", encoder="bi")
    with pytest.raises(ValueError, match="not a sentence-transformers Transformer: finesim export supports"):
        export_model(str(folder), tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the command


def test_cli_export(bi_dir: Path, torch_scores: np.ndarray, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from finesim.cli.main import main

    out = tmp_path / "exported"
    assert main(["export", str(bi_dir), "--to", str(out), "--quantize", "int8", "-q"]) == 0
    line = capsys.readouterr().out
    assert f"to {out}: onnx int8" in line and "agreement with torch" in line
    np.testing.assert_allclose(ConditionalScorer(str(out)).score(S1, S2, C), torch_scores, atol=INT8_ATOL)
    capsys.readouterr()
    # an error is one line and exit code 1; the folder is left as it was
    assert main(["export", str(bi_dir), "--to", str(out), "--quantize", "none"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("finesim export: error: --to") and "pass --overwrite" in err and "\n" not in err
    assert read_marker(out)["runtime"]["quantize"] == "int8"
    assert main(["export", str(bi_dir), "--to", str(out), "--quantize", "none", "--overwrite", "-q"]) == 0
    assert read_marker(out)["runtime"]["quantize"] == "none"
    assert main(["export", str(tmp_path / "nowhere"), "--to", str(tmp_path / "o2"), "-q"]) == 1
    # --quantize bf16 alone: torch, the only format for bf16, and a line saying so
    assert main(["export", str(bi_dir), "--to", str(tmp_path / "bf16"), "--quantize", "bf16"]) == 0
    captured = capsys.readouterr()
    assert "using --format torch" in captured.err and f"to {tmp_path / 'bf16'}: torch bf16" in captured.out
    # usage errors: exit code 2
    for argv in (
        ["export", str(bi_dir)],
        ["export", str(bi_dir), "--to", str(tmp_path / "o3"), "--quantize", "bf16", "--format", "onnx"],
        ["export", str(bi_dir), "--to", str(tmp_path / "o3"), "--device", "cuda"],
        ["export", str(bi_dir), "--to", str(tmp_path / "o3"), "--format", "tflite"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2, argv
    assert not (tmp_path / "o3").exists()


def test_exported_model_card_describes_the_export_and_its_code_runs(onnx_fp32: Path, tmp_path: Path) -> None:
    from card_helpers import run_card, scores_printed

    text = (onnx_fp32 / "README.md").read_text(encoding="utf-8")
    assert "### Export" in text and "**ONNX Runtime fp32** (`onnx/model.onnx`" in text
    assert "The finesim loader runs this export's ONNX Runtime fp32 runtime" in text
    assert "finesim.ConditionalScorer('path/to/fp32')" in text  # the final folder's name, not the build folder's
    assert str(onnx_fp32.resolve()) not in text and ".export" not in text
    # no torch weights: the card says plain sentence-transformers cannot load it, and shows no code that would fail
    assert "= SentenceTransformer(" not in text and "plain sentence-transformers cannot load it" in text
    printed = scores_printed(run_card(onnx_fp32, tmp_path))
    expected = ConditionalScorer(str(onnx_fp32)).similarity(
        ["A man is playing a guitar on a small stage."] * 2,
        ["A woman is singing into a microphone at a concert."] * 2,
        ["the kind of performance", "the gender of the performer"],
    )
    assert [score for _, score in printed] == pytest.approx(list(expected), abs=1e-4)


def test_torch_export_card_of_a_tri_encoder_shows_plain_code_that_runs(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from card_helpers import run_card, scores_printed

    from finesim.models.builders import build_tri_encoder

    tri = save_model(build_tri_encoder(str(tiny_bert_dir), head="hypernet", max_length=64), tmp_path / "tri")
    result = export_model(str(tri), tmp_path / "tri-bf16", quantize="bf16")
    assert (result.path / "finesim_condition_head.py").is_file()
    text = (result.path / "README.md").read_text(encoding="utf-8")
    assert "model = SentenceTransformer('path/to/tri-bf16', trust_remote_code=True)" in text
    assert "plain sentence-transformers ignores it and runs the fp32 torch weights kept beside it" in text
    printed = [score for _, score in scores_printed(run_card(result.path, tmp_path / "run"))]
    assert len(printed) == 4 and printed[:2] == pytest.approx(printed[2:], abs=0.05)  # fp32 (plain) vs bf16


def test_score_and_serve_load_an_exported_model(onnx_fp32: Path, torch_scores: np.ndarray, tmp_path: Path) -> None:
    """``finesim score`` and ``finesim serve`` take the exported folder like any model and run its runtime."""
    import csv

    from fastapi.testclient import TestClient

    from finesim.cli.main import main
    from finesim.serving import ServeSettings, create_app

    inp, out = tmp_path / "pairs.csv", tmp_path / "scored.csv"
    with open(inp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["sentence1", "sentence2", "condition"])
        writer.writerows(zip(S1, S2, C))
    assert main(["score", "--model", str(onnx_fp32), "--input", str(inp), "--output", str(out), "-q"]) == 0
    with open(out, newline="", encoding="utf-8") as fh:
        scored = [float(row["score"]) for row in csv.DictReader(fh)]
    np.testing.assert_allclose(scored, torch_scores, atol=FP32_ATOL)

    with TestClient(create_app(ServeSettings(model=str(onnx_fp32)))) as client:
        deadline = time.monotonic() + 60  # the model loads in the background: /health is 503 until it is ready
        while client.get("/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        info = client.get("/info").json()
        answer = client.post("/similarity", json={"sentence1": S1, "sentence2": S2, "condition": C})
    assert answer.status_code == 200, answer.text
    np.testing.assert_allclose(answer.json()["scores"], torch_scores, atol=FP32_ATOL)
    assert info["encoder"] == "bi" and info["model"] == str(onnx_fp32)


def test_a_killed_exports_unfinished_folder_is_removed_by_the_next(bi_dir: Path, tmp_path: Path) -> None:
    """A killed export left `.NAME.xxxx.export/` beside its target, and a rerun did not remove it. The folder's name
    carries the exporting process's id now: one whose process is gone is removed, a running one's is kept."""
    import os
    import subprocess

    done = subprocess.Popen(["true"])
    done.wait()  # a process id no longer running
    dead = tmp_path / f".out.{done.pid}-abc12345.export"
    alive = tmp_path / f".out.{os.getpid()}-def45678.export"
    for folder in (dead, alive):
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"half")
    export_model(str(bi_dir), tmp_path / "out", quantize="none")
    assert not dead.exists() and alive.is_dir()
    assert not [p for p in tmp_path.glob(".out.*.export") if p != alive]  # the export's own folder became out/
