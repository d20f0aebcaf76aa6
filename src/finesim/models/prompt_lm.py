"""Prompt-based sentence embeddings from decoder language models (PromptEOL / PromptSTH / PromptSUM).

Each sentence is wrapped in a manual template, encoded by the language model, and the hidden state of the
**last token of the last layer** is the embedding (Pcc-tuning, following PromptEOL). Padding is on the
**left**, so the last position is always a real token; a BOS token is added and no EOS (as in the reference
code).

The model is a plain ``SentenceTransformer`` (``Transformer`` + ``Pooling("lasttoken")``), so the
sentence-transformers trainer and any loss (``MultipleNegativesRankingLoss`` for stage 1,
:class:`~finesim.losses.pearson.PearsonLoss` for stage 2) work unchanged. The template is applied to the
*text* before the model sees it: :class:`PromptLMEncoder` does it in ``encode`` and
:meth:`PromptLMEncoder.template_dataset` does it to training columns. Templates are data (:data:`TEMPLATES`);
any string with one ``{sentence}`` field works.

LoRA goes through peft (``add_lora``); 4-bit QLoRA needs a CUDA GPU and bitsandbytes and otherwise fails with
a clear error.

Choices left open by the papers, exposed as options: the reference truncates the *sentence* to 32 (stage 1) or
64 (stage 2) tokens before templating (``sentence_max_tokens``); evaluation in the reference code also
normalises punctuation (``eval_normalize``: append ``.`` when a sentence does not end in ``.?"'``, replace
``"`` with ``'``, turn a final ``?`` into ``.``), which training does not do.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TEMPLATES: dict[str, str] = {
    "eol": 'This sentence : "{sentence}" means in one word:"',
    "sth": 'This sentence : "{sentence}" means something',
    "sum": 'This sentence : "{sentence}" can be summarized as',
}
CONFIG_NAME = "finesim_prompt_lm.json"


class QLoRAUnavailableError(RuntimeError):
    """Raised when 4-bit QLoRA is requested without a CUDA GPU or without bitsandbytes."""


def resolve_template(template: str) -> str:
    """A template name (``eol``, ``sth``, ``sum``) or a custom string with exactly one ``{sentence}``
    field."""
    text = TEMPLATES.get(template, template)
    if text.count("{sentence}") != 1:
        raise ValueError(
            f"template {template!r} is neither one of {sorted(TEMPLATES)} nor a string with exactly one "
            "'{sentence}' field"
        )
    return text


def eval_normalize(sentence: str) -> str:
    """The reference evaluation's punctuation normalisation (see the module docstring)."""
    s = sentence.strip().replace('"', "'")
    if s.endswith("?"):
        s = s[:-1] + "."
    if not s.endswith((".", "?", '"', "'")):
        s += "."
    return s


@dataclass(frozen=True)
class PromptConfig:
    """How sentences become prompts."""

    template: str = "sth"
    add_bos: bool = True
    sentence_max_tokens: int | None = None
    normalize: bool = False


def check_qlora_available() -> None:
    """Raise :class:`QLoRAUnavailableError` unless a CUDA GPU and bitsandbytes are present."""
    import importlib.util

    import torch

    missing = []
    if not torch.cuda.is_available():
        missing.append("a CUDA GPU (torch.cuda.is_available() is False)")
    if importlib.util.find_spec("bitsandbytes") is None:
        missing.append("the bitsandbytes package (pip install bitsandbytes)")
    if missing:
        raise QLoRAUnavailableError(
            "4-bit QLoRA needs " + " and ".join(missing) + "; use LoRA without quantization (quantize=None)."
        )


def build_prompt_lm(
    model_name_or_path: str,
    *,
    max_length: int = 128,
    quantize: str | None = None,
    device: str | None = None,
) -> Any:
    """A ``SentenceTransformer`` for a decoder LM: left padding, no automatic special tokens, last-token
    pooling.

    Args:
        model_name_or_path: a causal LM checkpoint (folder or Hub id).
        max_length: token limit of the templated input.
        quantize: None or ``"4bit"`` (NF4 with double quantisation, fp32 compute, as the reference; needs CUDA
            and bitsandbytes).
        device: where to put the model.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    from finesim.models.loading import resolve_model_path

    model_kwargs: dict[str, Any] = {}
    if quantize is not None:
        if quantize != "4bit":
            raise ValueError(f"quantize must be None or '4bit', got {quantize!r}")
        check_qlora_available()
        import torch
        from transformers import BitsAndBytesConfig

        model_kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32,
        )
    path = resolve_model_path(model_name_or_path)
    transformer = Transformer(
        path,
        model_kwargs=model_kwargs,
        processing_kwargs={"text": {"add_special_tokens": False}},
        max_seq_length=max_length,
    )
    tokenizer = transformer.tokenizer
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="lasttoken")
    model = SentenceTransformer(modules=[transformer, pooling], device=device)
    if quantize is not None:
        from peft import prepare_model_for_kbit_training

        transformer.auto_model = prepare_model_for_kbit_training(transformer.auto_model)
    return model


def add_lora(
    model: Any,
    *,
    r: int = 64,
    alpha: int = 16,
    dropout: float = 0.05,
    target_modules: str | list[str] = "all-linear",
) -> Any:
    """Add a trainable LoRA adapter (reference: r 64, alpha 16, dropout 0.05, every linear layer except the
    output head); the base weights are frozen. Returns the ``LoraConfig``."""
    from peft import LoraConfig

    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, bias="none", target_modules=target_modules)
    model.add_adapter(config)
    return config


class PromptLMEncoder:
    """A prompt-templated decoder-LM sentence encoder; implements ``encode`` so the evaluation harness and
    :class:`~finesim.evaluation.scoring.EmbeddingScorer` work with it.

    Args:
        model: a model from :func:`build_prompt_lm`.
        config: template and input options.
    """

    def __init__(self, model: Any, config: PromptConfig | None = None) -> None:
        self.model = model
        self.config = config or PromptConfig()
        self.template = resolve_template(self.config.template)
        self.tokenizer = model[0].tokenizer
        if self.tokenizer.padding_side != "left":
            raise ValueError("prompt-based last-token pooling needs left padding (tokenizer.padding_side='left')")

    def _truncate(self, sentence: str) -> str:
        limit = self.config.sentence_max_tokens
        if limit is None:
            return sentence
        ids = self.tokenizer(sentence, add_special_tokens=False)["input_ids"]
        if len(ids) <= limit:
            return sentence
        return self.tokenizer.decode(ids[:limit], skip_special_tokens=True)

    def prompts(self, sentences: Sequence[str], *, evaluation: bool = False) -> list[str]:
        """The model inputs for ``sentences``: truncated, (optionally normalised,) templated, BOS-prefixed."""
        bos = self.tokenizer.bos_token if self.config.add_bos and self.tokenizer.bos_token else ""
        out = []
        for s in sentences:
            s = self._truncate(s)
            if evaluation and self.config.normalize:
                s = eval_normalize(s)
            out.append(bos + self.template.format(sentence=s))
        return out

    def encode(self, sentences: Sequence[str] | str, **kwargs: Any) -> Any:
        """``SentenceTransformer.encode`` on the templated sentences (same keyword arguments)."""
        single = isinstance(sentences, str)
        texts = self.prompts([sentences] if single else list(sentences), evaluation=True)
        out = self.model.encode(texts, **kwargs)
        return out[0] if single else out

    def template_dataset(self, dataset: Any, columns: Sequence[str]) -> Any:
        """Template the text ``columns`` of a ``datasets.Dataset`` for training."""
        missing = [c for c in columns if c not in dataset.column_names]
        if missing:
            raise ValueError(f"dataset has no column(s) {missing}; it has {dataset.column_names}")
        return dataset.map(lambda b: {c: self.prompts(b[c]) for c in columns}, batched=True)

    def save(self, path: str | Path) -> None:
        """Save the model (with any LoRA adapter) and the prompt configuration."""
        path = Path(path)
        self.model.save(str(path))
        (path / CONFIG_NAME).write_text(json.dumps(asdict(self.config), indent=2), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path, *, device: str | None = None) -> PromptLMEncoder:
        """Load an encoder written by :meth:`save` (left padding restored, prompt configuration read back)."""
        from sentence_transformers import SentenceTransformer

        path = Path(path)
        config_file = path / CONFIG_NAME
        if not config_file.is_file():
            raise FileNotFoundError(f"{config_file} not found: not a folder written by PromptLMEncoder.save")
        config = PromptConfig(**json.loads(config_file.read_text(encoding="utf-8")))
        model = SentenceTransformer(str(path), device=device)
        model[0].tokenizer.padding_side = "left"
        return cls(model, config)
