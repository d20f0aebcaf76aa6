"""Evaluation wrapper of a prompt-based decoder-LM encoder (:class:`PromptLMEncoder`) with the reference
evaluation's optional punctuation normalisation, and reloading such a model (:func:`load_prompt_lm`).

Building one (template, LoRA through peft, 4-bit QLoRA) is :func:`finesim.models.builders.build_prompt_lm`; the
template itself lives in the model (:mod:`finesim.models.prompt_transformer`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from finesim.models.io import load_with_finesim_modules
from finesim.models.prompt_transformer import eval_normalize, find_prompt_transformer, resolve_template
from finesim.results import write_json_atomic

CONFIG_NAME = "finesim_prompt_lm.json"


@dataclass(frozen=True)
class PromptConfig:
    """How sentences become prompts (``normalize`` applies to :meth:`PromptLMEncoder.encode` only)."""

    template: str = "sth"
    add_bos: bool = True
    sentence_max_tokens: int | None = None
    normalize: bool = False


def load_prompt_lm(path: str | Path, *, device: str | None = None, **kwargs: Any) -> Any:
    """Reload a saved prompt-based model (template, adapter and left padding restored)."""
    model = load_with_finesim_modules(str(path), device=device, **kwargs)
    find_prompt_transformer(model)
    return model


class PromptLMEncoder:
    """Evaluation wrapper around a prompt-based model: ``encode`` with the reference's optional punctuation
    normalisation; works with :class:`~finesim.evaluation.scoring.EmbeddingScorer` and the evaluation harness.

    Args:
        model: a model from :func:`build_prompt_lm`.
        config: when given, its template, BOS flag and sentence limit are set on the model's
            :class:`PromptTransformer`; None reads them from the model.
    """

    def __init__(self, model: Any, config: PromptConfig | None = None) -> None:
        self.model = model
        module = find_prompt_transformer(model)
        self.normalize = False
        if config is not None:
            resolve_template(config.template)
            module.template, module.add_bos = config.template, config.add_bos
            module.sentence_max_tokens = config.sentence_max_tokens
            self.normalize = config.normalize
        self.module = module
        assert module.tokenizer is not None  # PromptTransformer.__init__ refuses a model without one
        if module.tokenizer.padding_side != "left":
            raise ValueError("prompt-based last-token pooling needs left padding (tokenizer.padding_side='left')")

    @property
    def config(self) -> PromptConfig:
        """The prompt configuration in force."""
        m = self.module
        return PromptConfig(m.template, m.add_bos, m.sentence_max_tokens, self.normalize)

    def prompts(self, sentences: Sequence[str], *, evaluation: bool = False) -> list[str]:
        """The model inputs for ``sentences`` (normalised first when ``evaluation`` and ``normalize``)."""
        if evaluation and self.normalize:
            sentences = [eval_normalize(s) for s in sentences]
        return self.module.prompts(list(sentences))

    def encode(self, sentences: Sequence[str] | str, **kwargs: Any) -> Any:
        """``SentenceTransformer.encode`` (same keyword arguments); the model applies the template."""
        single = isinstance(sentences, str)
        texts = [sentences] if isinstance(sentences, str) else list(sentences)
        if self.normalize:
            texts = [eval_normalize(s) for s in texts]
        out = self.model.encode(texts, **kwargs)
        return out[0] if single else out

    def save(self, path: str | Path) -> None:
        """Save the model (with any LoRA adapter and its template) and the prompt configuration."""
        path = Path(path)
        self.model.save(str(path))
        write_json_atomic(path / CONFIG_NAME, asdict(self.config))

    @classmethod
    def load(cls, path: str | Path, *, device: str | None = None) -> PromptLMEncoder:
        """Load an encoder written by :meth:`save`."""
        path = Path(path)
        config_file = path / CONFIG_NAME
        if not config_file.is_file():
            raise FileNotFoundError(f"{config_file} not found: not a folder written by PromptLMEncoder.save")
        config = PromptConfig(**json.loads(config_file.read_text(encoding="utf-8")))
        return cls(load_prompt_lm(path, device=device), config)
