"""The transformers backend with tiny random models, and ``finesim prompt-eval`` end to end."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from finesim.cli.main import main
from finesim.prompting import HFBackend, ReplyCache, evaluate_prompting
from finesim.prompting.cache import cache_key

pytestmark = pytest.mark.filterwarnings("ignore")

WORDS = "a man woman dog cat plays runs eats guitar piano ball park street house car red blue".split()


def build_tiny_t5(folder: Path, seed: int = 0) -> Path:
    """A tiny random T5 (encoder-decoder) with the same WordPiece tokenizer as the conftest models."""
    import torch
    from transformers import BertTokenizerFast, T5Config, T5ForConditionalGeneration

    from conftest import write_vocab

    torch.manual_seed(seed)
    vocab = write_vocab(folder)
    tokenizer = BertTokenizerFast(
        vocab=vocab, do_lower_case=True, eos_token="[SEP]", model_input_names=["input_ids", "attention_mask"]
    )
    config = T5Config(
        vocab_size=tokenizer.vocab_size,
        d_model=16,
        d_kv=4,
        d_ff=32,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=4,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    T5ForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_t5_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_t5(tmp_path_factory.mktemp("tiny-t5"))


def write_csts(path: Path, n_pairs: int, offset: int = 0) -> Path:
    """A small C-STS CSV: each pair under a high and a low condition."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["sentence1", "sentence2", "condition", "label"])
        for i in range(n_pairs):
            a = " ".join(WORDS[(i + offset + j) % len(WORDS)] for j in range(4))
            b = " ".join(WORDS[(2 * i + offset + j) % len(WORDS)] for j in range(3))
            w.writerow([a, b, f"the color of {WORDS[i % len(WORDS)]}", 1 + (i % 3)])
            w.writerow([a, b, f"the size of {WORDS[(i + 1) % len(WORDS)]}", 4 + (i % 2)])
    return path


@pytest.fixture()
def csts_files(tmp_path: Path) -> tuple[Path, Path]:
    return write_csts(tmp_path / "train.csv", 6), write_csts(tmp_path / "validation.csv", 4, offset=5)


def test_causal_backend_left_pads_batches_and_returns_only_the_continuation(tiny_causal_lm_dir):
    backend = HFBackend(str(tiny_causal_lm_dir), batch_size=3, max_new_tokens=4, show_progress=False)
    assert backend.kind == "causal" and backend.tokenizer.padding_side == "left"
    assert backend.settings()["dtype"] == "float32" and backend.add_special_tokens is False
    prompts = [
        "a man plays the guitar output:",
        "dog",
        "the red car is in the street and the blue house",
        "cat",
    ]
    seen: list[int] = []
    batched = backend.generate(prompts, on_reply=lambda i, r: seen.append(i))
    one_by_one = [backend.generate([p])[0] for p in prompts]
    assert batched == one_by_one  # padding does not change greedy replies
    assert sorted(seen) == [0, 1, 2, 3]
    for prompt, reply in zip(prompts, batched):
        assert isinstance(reply, str) and not reply.startswith(prompt)
        assert len(backend.tokenizer(reply, add_special_tokens=False)["input_ids"]) <= 4 + 2


def test_seq2seq_backend_is_detected_and_batched(tiny_t5_dir):
    backend = HFBackend(str(tiny_t5_dir), batch_size=2, max_new_tokens=3, dtype="fp32", show_progress=False)
    assert backend.kind == "seq2seq" and backend.tokenizer.padding_side == "right"
    assert backend.add_special_tokens is True
    prompts = ["a man plays the guitar", "dog", "the red car is in the street"]
    batched = backend.generate(prompts)
    assert batched == [backend.generate([p])[0] for p in prompts]
    assert all(isinstance(r, str) for r in batched)


def test_dtype_choice_and_bad_options(tiny_causal_lm_dir):
    import torch

    bf16 = HFBackend(str(tiny_causal_lm_dir), dtype="bf16", show_progress=False, max_new_tokens=2)
    assert bf16.settings()["dtype"] == "bfloat16"
    assert next(bf16.lm.parameters()).dtype == torch.bfloat16  # the weights really load in bf16
    assert len(bf16.generate(["a dog", "a cat runs"])) == 2
    with pytest.raises(ValueError, match="unknown dtype"):
        HFBackend(str(tiny_causal_lm_dir), dtype="int3")
    with pytest.raises(ValueError, match="no chat template"):
        HFBackend(str(tiny_causal_lm_dir), chat_template=True)


def test_evaluate_with_causal_lm_and_resume_from_cache(tiny_causal_lm_dir, csts_files, tmp_path):
    from finesim.data import read_csts

    train, _ = read_csts(csts_files[0])
    queries, _ = read_csts(csts_files[1])
    backend = HFBackend(str(tiny_causal_lm_dir), batch_size=4, max_new_tokens=5, show_progress=False)
    cache = ReplyCache(tmp_path / "replies.jsonl")
    kwargs = {"task": "csts", "k": 2, "instructions": "short", "seed": 0}
    first = evaluate_prompting(queries, train, backend, cache=cache, **kwargs)
    assert first["requests"]["from_cache"] == 0 and first["requests"]["generated"] == 8
    m = first["metrics"]
    assert m["n"] == 8 and 0 <= m["invalid_percent"] <= 100
    assert m["invalid"] == sum(r["invalid"] for r in first["rows"])
    assert all(1.0 <= r["prediction"] <= 5.0 for r in first["rows"] if r["invalid"])
    assert first["example_prompt"].startswith("On a scale between 1 and 5")
    assert first["example_prompt"].count("\nInput: ") == 3  # two demonstrations, then the query

    calls: list[int] = []
    original = backend.generate

    def counting(prompts, on_reply=None):
        calls.append(len(prompts))
        return original(prompts, on_reply)

    backend.generate = counting  # type: ignore[method-assign]
    second = evaluate_prompting(queries, train, backend, cache=ReplyCache(tmp_path / "replies.jsonl"), **kwargs)
    assert calls == [0]  # nothing re-generated
    assert second["requests"]["from_cache"] == 8
    assert [r["reply"] for r in second["rows"]] == [r["reply"] for r in first["rows"]]
    assert second["metrics"] == first["metrics"]


def test_cli_prompt_eval_end_to_end(tiny_causal_lm_dir, csts_files, tmp_path, capsys):
    out = tmp_path / "results" / "run.json"
    argv = [
        "prompt-eval",
        "--backend",
        "hf",
        "--model",
        str(tiny_causal_lm_dir),
        "--task",
        "csts",
        "--k-shot",
        "4",
        "--instructions",
        "long",
        "--eval-file",
        str(csts_files[1]),
        "--train-file",
        str(csts_files[0]),
        "--limit",
        "5",
        "--max-new-tokens",
        "4",
        "--output",
        str(out),
    ]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[0])
    assert summary["n"] == 5 and summary["k_shot"] == 4
    result = json.loads(out.read_text())
    assert result["command"] == "prompt-eval" and result["task"] == "csts"
    assert result["config"]["instructions"] == "long" and result["config"]["limit"] == 5
    assert result["data"]["rows_evaluated"] == 5 and len(result["data"]["train_sha256"]) == 64
    assert result["backend"]["kind"] == "causal"
    assert "versions" in result["environment"]
    assert len(result["rows"]) == 5
    assert result["demonstrations"]["k"] == 4
    cache_file = out.with_name("run.replies.jsonl")
    lines = cache_file.read_text().splitlines()
    assert len(lines) == 5
    entry = json.loads(lines[0])
    assert entry["backend"] == "hf" and len(entry["key"]) == 64
    # a rerun is answered from the cache
    assert main(argv) == 0
    again = json.loads(out.read_text())
    assert again["requests"]["from_cache"] == 5 and again["requests"]["generated"] == 0
    assert again["metrics"] == result["metrics"]
    assert len(cache_file.read_text().splitlines()) == 5


def test_cache_key_depends_on_settings(tiny_causal_lm_dir):
    a = HFBackend(str(tiny_causal_lm_dir), max_new_tokens=5, show_progress=False)
    b = HFBackend(str(tiny_causal_lm_dir), max_new_tokens=6, show_progress=False)
    assert cache_key(a.name, a.model, a.settings(), "p") != cache_key(b.name, b.model, b.settings(), "p")
    assert cache_key(a.name, a.model, a.settings(), "p") == cache_key("hf", a.model, dict(a.settings()), "p")


def test_chat_template_wraps_the_prompt_as_a_user_turn(tiny_causal_lm_dir, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    folder = tmp_path / "chat-lm"
    shutil.copytree(tiny_causal_lm_dir, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    tokenizer.save_pretrained(folder)
    backend = HFBackend(str(folder), chat_template=True, max_new_tokens=2, show_progress=False)
    assert backend._render("how similar?") == "user: how similar?\nassistant:"
    assert backend.settings()["chat_template"] is True
    assert len(backend.generate(["a dog", "a cat"])) == 2
