"""Prompt-based sentence embeddings from decoder language models (PromptEOL / PromptSTH / PromptSUM).

Each sentence is wrapped in a manual template, encoded by the language model, and the hidden state of the
**last token of the last layer** is the embedding (Pcc-tuning, following PromptEOL). Padding is on the
**left**, so the last position is always a real token; a BOS token is added and no EOS (as in the reference
code).

The template lives **inside the model**: :class:`PromptTransformer` is sentence-transformers' ``Transformer``
module with a ``preprocess`` that templates raw sentences before tokenising them. The model is an ordinary
``SentenceTransformer`` (``PromptTransformer`` + ``Pooling("lasttoken")``) that takes plain sentences
everywhere: in ``encode``, in the sentence-transformers trainer (``MultipleNegativesRankingLoss`` for stage 1,
:class:`~finesim.losses.pearson.PearsonLoss` for stage 2), in the recipe runner (encoder type ``prompt-lm``)
and in ``finesim evaluate``. The template, BOS flag and sentence limit are saved in the module's
``sentence_bert_config.json`` and come back on reload (finesim's loaders resolve the class without
``trust_remote_code``). Templates are data (:data:`TEMPLATES`); any string with one ``{sentence}`` field works.

**Truncation cuts the sentence, never the template.** A templated prompt longer than the token limit would
lose its end under ordinary right truncation, so the last token (the one pooled) would be a template token in
the middle of the prompt and different sentences could give identical inputs. :func:`fit_prompts` shortens the
*sentence* (token by token, decoded back to text as the reference does) until the whole prompt fits the limit;
``sentence_max_tokens`` additionally caps the sentence (the reference uses 32 tokens in stage 1 and 64 in
stage 2, before templating).

LoRA goes through peft (``add_lora``); 4-bit QLoRA needs a CUDA GPU and bitsandbytes and otherwise fails with
a clear error.

Evaluation-only option: the reference evaluation normalises punctuation (``eval_normalize``: append ``.`` when a
sentence does not end in ``.?"\'``, replace ``"`` with ``\'``, turn a final ``?`` into ``.``) and training does
not; :class:`PromptLMEncoder` applies it in ``encode`` when ``PromptConfig(normalize=True)``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from sentence_transformers.base.modules.transformer import Transformer

from finesim.results import write_json_atomic

TEMPLATES: dict[str, str] = {
    "eol": 'This sentence : "{sentence}" means in one word:"',
    "sth": 'This sentence : "{sentence}" means something',
    "sum": 'This sentence : "{sentence}" can be summarized as',
}
CONFIG_NAME = "finesim_prompt_lm.json"
# no automatic special tokens: the BOS token is prefixed as text and no EOS is added (reference code)
_NO_SPECIAL_TOKENS = {"text": {"add_special_tokens": False}}


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


def _n_tokens(tokenizer: Any, texts: list[str]) -> list[int]:
    # verbose=False: prompts longer than the limit are expected here (that is what is being measured)
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]


def fit_prompts(
    tokenizer: Any,
    sentences: Sequence[str],
    template: str,
    *,
    max_length: int | None,
    sentence_max_tokens: int | None = None,
    bos: str = "",
) -> list[str]:
    """``bos + template`` around each sentence, the sentence shortened so the prompt has at most ``max_length``
    tokens (the template is never cut; see the module docstring).

    A sentence is cut to its first ``sentence_max_tokens`` tokens, then further while the tokenised prompt is
    longer than ``max_length`` (re-tokenising the decoded text, since tokens can merge across the template's
    boundary). ``max_length=None`` leaves the length alone.

    Raises:
        ValueError: the template with an empty sentence is already longer than ``max_length``.
    """
    text = resolve_template(template)
    if sentence_max_tokens is not None and sentence_max_tokens < 0:
        raise ValueError(f"sentence_max_tokens must be >= 0, got {sentence_max_tokens}")
    ids = tokenizer(list(sentences), add_special_tokens=False, verbose=False)["input_ids"]
    limits = [len(x) if sentence_max_tokens is None else min(len(x), sentence_max_tokens) for x in ids]

    def render(i: int) -> str:
        s = sentences[i]
        if limits[i] < len(ids[i]):
            s = tokenizer.decode(ids[i][: limits[i]], skip_special_tokens=True)
        return bos + text.replace("{sentence}", s)  # not str.format: other braces in a template stay as they are

    prompts = [render(i) for i in range(len(sentences))]
    if max_length is None:
        return prompts
    todo = list(range(len(prompts)))
    while todo:
        lengths = _n_tokens(tokenizer, [prompts[i] for i in todo])
        over = [(i, n - max_length) for i, n in zip(todo, lengths) if n > max_length]
        for i, excess in over:
            if limits[i] == 0:
                raise ValueError(
                    f"the template {template!r} alone takes more than max_length={max_length} tokens; raise "
                    "max_length or shorten the template"
                )
            limits[i] = max(0, limits[i] - excess)
            prompts[i] = render(i)
        todo = [i for i, _ in over]
    return prompts


class PromptTransformer(Transformer):
    """sentence-transformers' ``Transformer`` that templates raw sentences before tokenising them.

    Left padding, no automatic special tokens, the tokenizer's BOS token prefixed (``add_bos``), the sentence
    truncated so the prompt fits the token limit (:func:`fit_prompts`). Extra configuration (saved with the
    model): ``template`` (a :data:`TEMPLATES` name or a string with one ``{sentence}``), ``add_bos``,
    ``sentence_max_tokens``.
    """

    config_keys: ClassVar[list[str]] = [*Transformer.config_keys, "template", "add_bos", "sentence_max_tokens"]
    accepts_text_pairs: ClassVar[bool] = False  # one {sentence} slot: C-STS tasks are skipped by the harness

    def __init__(
        self,
        model_name_or_path: str,
        *,
        template: str = "sth",
        add_bos: bool = True,
        sentence_max_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["processing_kwargs"] = {**_NO_SPECIAL_TOKENS, **(kwargs.get("processing_kwargs") or {})}
        super().__init__(model_name_or_path, **kwargs)
        resolve_template(template)
        self.template = template
        self.add_bos = bool(add_bos)
        self.sentence_max_tokens = sentence_max_tokens
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise ValueError(f"{model_name_or_path} has no text tokenizer; a prompt-based encoder needs one")
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token

    def prompts(self, sentences: Sequence[str], *, max_length: int | None = None) -> list[str]:
        """The model inputs for ``sentences`` (templated, BOS-prefixed, fitted to ``max_length`` or the
        module's ``max_seq_length``)."""
        bad = [i for i, s in enumerate(sentences) if not isinstance(s, str)]
        if bad:
            raise ValueError(
                f"a prompt-based encoder takes single sentences (str); input {bad[0]} is "
                f"{type(sentences[bad[0]]).__name__} (sentence pairs or conditions are not supported)"
            )
        bos = self.tokenizer.bos_token if self.add_bos and self.tokenizer.bos_token else ""
        return fit_prompts(
            self.tokenizer,
            sentences,
            self.template,
            max_length=max_length or self.max_seq_length,
            sentence_max_tokens=self.sentence_max_tokens,
            bos=bos,
        )

    def preprocess(
        self, inputs: Sequence[Any], prompt: str | None = None, processing_kwargs: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        if prompt:
            raise ValueError(
                "a prompt-based encoder applies its own template; do not pass a sentence-transformers prompt"
            )
        # the limit the tokenizer will apply: per-call processing_kwargs win over a caller's max_length (as in
        # sentence-transformers), else the module's max_seq_length
        text_kwargs = (processing_kwargs or {}).get("text") or {}
        limit = text_kwargs.get("max_length") or kwargs.get("max_length")
        texts = self.prompts(list(inputs), max_length=limit)
        return super().preprocess(texts, processing_kwargs=processing_kwargs, **kwargs)


@dataclass(frozen=True)
class PromptConfig:
    """How sentences become prompts (``normalize`` applies to :meth:`PromptLMEncoder.encode` only)."""

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


def _quantization_kwargs(quantize: str | None) -> dict[str, Any]:
    if quantize is None:
        return {}
    if quantize != "4bit":
        raise ValueError(f"quantize must be None or '4bit', got {quantize!r}")
    check_qlora_available()
    import torch
    from transformers import BitsAndBytesConfig

    return {
        "quantization_config": BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32,
        )
    }


def find_prompt_transformer(model: Any) -> PromptTransformer:
    """The model's :class:`PromptTransformer` (its first module); a clear error otherwise."""
    first = model[0] if len(model) else None
    if not isinstance(first, PromptTransformer):
        raise ValueError(f"not a prompt-based model: its first module is {type(first).__name__}, not PromptTransformer")
    return first


def has_lora(model: Any) -> bool:
    """Whether the model carries a LoRA adapter."""
    return any("lora_" in name for name, _ in model.named_parameters())


def build_prompt_lm(
    model_name_or_path: str,
    *,
    max_length: int | None = None,
    quantize: str | None = None,
    device: str | None = None,
    template: str | None = None,
    add_bos: bool | None = None,
    sentence_max_tokens: int | None = None,
) -> Any:
    """A ``SentenceTransformer`` for a decoder LM: :class:`PromptTransformer` + last-token pooling.

    ``model_name_or_path`` may also be a folder saved from such a model (e.g. the stage-1 output); it is reloaded
    with its LoRA adapter, which stays trainable. On reload, an option left at None keeps the saved value and an
    option given replaces it.

    Args:
        model_name_or_path: a causal LM checkpoint (folder or Hub id) or a saved prompt-based model.
        max_length: token limit of the templated input (the sentence is shortened to fit); None keeps the saved
            model's limit, or for a fresh model the tokenizer's.
        quantize: None or ``"4bit"`` (NF4 with double quantisation, fp32 compute, as the reference; needs CUDA
            and bitsandbytes).
        device: where to put the model.
        template, add_bos, sentence_max_tokens: see :class:`PromptTransformer`; None keeps the saved value, or
            for a fresh model ``"sth"``, True and no sentence limit.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    from finesim.models.loading import resolve_model_path

    model_kwargs = _quantization_kwargs(quantize)
    path = resolve_model_path(model_name_or_path)
    if (Path(path) / "modules.json").is_file():
        model = load_prompt_lm(path, device=device, model_kwargs=model_kwargs or None)
        module = find_prompt_transformer(model)
        if template is not None:
            resolve_template(template)
            module.template = template
        if add_bos is not None:
            module.add_bos = bool(add_bos)
        if sentence_max_tokens is not None:
            module.sentence_max_tokens = sentence_max_tokens
        if max_length is not None:
            module.max_seq_length = max_length
    else:
        transformer = PromptTransformer(
            path,
            template="sth" if template is None else template,
            add_bos=True if add_bos is None else add_bos,
            sentence_max_tokens=sentence_max_tokens,
            model_kwargs=model_kwargs,
            max_seq_length=max_length,
        )
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="lasttoken")
        model = SentenceTransformer(modules=[transformer, pooling], device=device)
    if quantize is not None:
        from peft import prepare_model_for_kbit_training

        module = find_prompt_transformer(model)
        module.model = prepare_model_for_kbit_training(module.model)  # freezes every parameter
    if has_lora(model):  # a reloaded adapter goes on training (the reference's is_trainable=True)
        for name, p in model.named_parameters():
            p.requires_grad = "lora_" in name
    return model


def load_prompt_lm(path: str | Path, *, device: str | None = None, **kwargs: Any) -> Any:
    """Reload a saved prompt-based model (template, adapter and left padding restored)."""
    from finesim.models.projection_head import load_model_with_projection_head

    model = load_model_with_projection_head(str(path), device=device, **kwargs)
    find_prompt_transformer(model)
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
        if config is not None:
            resolve_template(config.template)
            module.template, module.add_bos = config.template, config.add_bos
            module.sentence_max_tokens = config.sentence_max_tokens
            self.normalize = config.normalize
        else:
            self.normalize = False
        self.module = module
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
        texts = [sentences] if single else list(sentences)
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
