"""Shared fixtures: tiny random models built from a config (no downloads) and small data files."""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _restore_logging_state():
    """A command run in-process (``main([...])``) sets finesim's and the libraries' log levels (``-q``: ERROR), and a
    library that configures logging with ``dictConfig`` can disable loggers created before it (finesim's module
    loggers): put levels, ``disabled`` and ``propagate`` back after each test, so that a later test's ``caplog`` sees
    finesim's warnings whatever ran before."""
    libraries = ("", "transformers", "sentence_transformers", "datasets", "huggingface_hub", "accelerate")

    def loggers() -> list[logging.Logger]:
        names = [n for n in logging.root.manager.loggerDict if n == "finesim" or n.startswith("finesim.")]
        return [logging.getLogger(n) for n in (*libraries, "finesim", *names)]

    saved = {id(lg): (lg, lg.level, lg.disabled, lg.propagate) for lg in loggers()}
    yield
    for lg, level, disabled, propagate in saved.values():
        lg.setLevel(level)
        lg.disabled, lg.propagate = disabled, propagate


WORDS = (
    "a an the man woman dog cat boy girl is are was plays playing runs running eats eating food guitar piano "
    "ball park street house car red blue green small big old young happy sad sits sitting walks walking on in "
    "with and of to color animal sport person activity location number size time weather music two three"
).split()

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def write_vocab(folder: Path) -> dict[str, int]:
    """Write a tiny WordPiece vocabulary to ``folder/vocab.txt`` and return it as a token -> id mapping."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *WORDS,
        *[f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"],
    ]
    vocab += list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'\"-:;")
    tokens = list(dict.fromkeys(vocab))
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return {token: i for i, token in enumerate(tokens)}


def build_tiny_bert(folder: Path, *, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Save a tiny random BERT checkpoint with a WordPiece tokenizer to ``folder`` (a plain transformers folder)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    torch.manual_seed(seed)
    vocab = write_vocab(folder)
    tokenizer = BertTokenizerFast(vocab=vocab, do_lower_case=True)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=hidden * 2,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


TINY_STS_ROWS = [
    (4.0, "a man plays guitar", "a man plays piano"),
    (1.0, "a dog runs in the park", "a cat sits in the house"),
    (3.0, "the cat eats food", "the dog eats"),
    (0.5, "a girl walks", "two boys sit"),
    (5.0, "a red car", "a red car"),
    (2.0, "a woman sits", "a woman runs"),
    (3.5, "the boy is happy", "the girl is happy"),
    (0.0, "music on the street", "a big old house"),
]


def write_tiny_stsb(path: Path) -> Path:
    """Write a 16-row STS-B-format file (the 8 ``TINY_STS_ROWS`` twice) to ``path``; returns it."""
    lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{y}\t{a}\t{b}" for i, (y, a, b) in enumerate(TINY_STS_ROWS)]
    path.write_text("\n".join(lines * 2) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain transformers checkpoint of a tiny random BERT."""
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture()
def tiny_model(tiny_bert_dir: Path):
    """A fresh SentenceTransformer (Transformer + mean Pooling) over the tiny BERT."""
    from finesim.models import load_sentence_model

    return load_sentence_model(str(tiny_bert_dir), max_length=64)


REQUIRE_ENV_VAR = "FINESIM_REQUIRE_DATA"


def skip_unless_required(reason: str) -> None:
    """Skip the test, or fail it when ``FINESIM_REQUIRE_DATA=1`` (CI sets it: a missing data folder or offline
    model must not let the correctness tests pass by being skipped)."""
    if os.environ.get(REQUIRE_ENV_VAR, "").strip() == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV_VAR}=1 makes this a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


def import_or_skip(module: str) -> Any:
    """``pytest.importorskip`` that fails instead under ``FINESIM_REQUIRE_DATA=1``."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        skip_unless_required(f"cannot import {module}: {err}")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real data folder; tests that need it are skipped when it is absent (failed under
    ``FINESIM_REQUIRE_DATA=1``)."""
    root = Path(os.environ.get("FINESIM_DATA", SHARED_DATA))
    if not root.is_dir():
        skip_unless_required(f"shared data not found at {root}")
    return root


def build_tiny_causal_lm(folder: Path, *, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Save a tiny random Llama-style causal LM with a WordPiece tokenizer (left padding) to ``folder``."""
    import torch
    from transformers import BertTokenizerFast, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    vocab = write_vocab(folder)
    tokenizer = BertTokenizerFast(
        vocab=vocab,
        do_lower_case=True,
        bos_token="[CLS]",
        eos_token="[SEP]",
        padding_side="left",
        model_input_names=["input_ids", "attention_mask"],
    )
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=hidden * 2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_causal_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random causal LM checkpoint (Llama architecture) with its tokenizer."""
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-causal-lm"))


def run_card_code(readme: Path, timeout: int = 300) -> str:
    """Run the ```python blocks of a model card (README.md) in order, in a fresh interpreter with this checkout's
    ``src`` importable; returns stdout (fails the test with stderr when the code fails)."""
    import re
    import subprocess
    import sys

    from finesim.models.card import placeholder_path

    # a card loads the model from ``path/to/<folder name>``: point it at the folder
    text = readme.read_text(encoding="utf-8")
    text = text.replace(repr(placeholder_path(readme.parent)), repr(str(readme.parent.resolve())))
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, f"{readme} has no python code block"
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", "\n\n".join(blocks)], capture_output=True, text=True, env=env, timeout=timeout
    )
    assert done.returncode == 0, f"the card's code failed:\n{done.stderr[-3000:]}"
    return done.stdout
