"""Builders of finesim's model types: the C-STS bi-, cross- and tri-encoders and prompt-based decoder LMs.

- **bi**: a plain ``SentenceTransformer`` fed ``(sentence, condition)`` text pairs (``[CLS] s [SEP] c
  [SEP]``); score ``cos(f(s1, c), f(s2, c))``. It loads in sentence-transformers without finesim.
- **cross**: a sentence-transformers ``CrossEncoder`` with one output and no activation, fed the text pair
  ``(s1, s2 [SEP] c)``; :func:`cross_second_text` says how that differs from the reference's single-sequence input.
  Its head (:data:`CROSS_HEADS`) is by default the reference's: pooled ``[CLS]`` → [transform] → Dropout →
  Linear(h, 1), built from sentence-transformers' own modules, so ``CrossEncoder(path)`` reloads it.
- **tri**: a ``SentenceTransformer`` whose last module is a :class:`~finesim.models.condition_head.ConditionHead`;
  sentences and condition go separately through the shared backbone and the head fuses them.
- **prompt-lm**: a decoder LM with a prompt template and last-token pooling (:func:`build_prompt_lm`), optionally
  with a LoRA adapter (peft) and 4-bit QLoRA (CUDA + bitsandbytes).

Saving and reloading: :mod:`finesim.models.io`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from finesim.models.condition_head import ConditionHead
from finesim.models.hub import resolve_model_path
from finesim.models.io import check_max_length, load_sentence_model, load_with_finesim_modules, pooling_mode
from finesim.models.prompt_transformer import PromptTransformer, find_prompt_transformer, has_lora, resolve_template
from finesim.models.weights import readable_weights

# cross-encoder heads: "linear" = the C-STS reference's (no pretrained pooler), "sequence-classification" =
# transformers' AutoModelForSequenceClassification head (BERT keeps its pretrained pooler Linear + Tanh)
CROSS_HEADS = ("linear", "sequence-classification")


def _config_dropout(transformer: Any) -> float:
    """The backbone's ``hidden_dropout_prob`` (0.1 when it has none): the dropout of the reference's heads."""
    return float(getattr(transformer.auto_model.config, "hidden_dropout_prob", 0.1) or 0.1)


def _transform_modules(dim: int, dropout: float) -> list[Any]:
    """The paper's "transform" MLP after pooling, ``Dropout → Linear(h, h) → GELU``, as sentence-transformers
    modules (they act on ``sentence_embedding``)."""
    from sentence_transformers.sentence_transformer.modules import Dense, Dropout

    return [Dropout(dropout), Dense(dim, dim, activation_function=torch.nn.GELU())]


def build_bi_encoder(
    backbone: str, *, pooling: str | None = None, transform: bool = False, max_length: int | None = None
) -> Any:
    """A bi-encoder ``SentenceTransformer`` over ``backbone`` (Hub id, ST folder or transformers folder).

    Args:
        pooling: ``cls``, ``mean``, ``lasttoken`` (alias ``last-token``), any sentence-transformers pooling mode;
            None keeps the backbone's own pooling (``mean`` for a plain transformers checkpoint).
        transform: append the paper's transform MLP (Dropout → Linear → GELU).
        max_length: maximum tokens of the (sentence, condition) pair; None keeps the backbone's.
    """
    model = load_sentence_model(backbone, pooling=pooling, max_length=max_length)
    if transform:
        for module in _transform_modules(model.get_embedding_dimension(), _config_dropout(model[0])):
            model.append(module.to(model.device))  # beside the backbone (a GPU when one was picked)
    return model


def build_tri_encoder(
    backbone: str,
    *,
    head: str | None,
    pooling: str | None = None,
    transform: bool = False,
    max_length: int | None = None,
    dropout: float | None = None,
    rank: int | None = None,
) -> Any:
    """A tri-encoder: backbone + pooling + :class:`ConditionHead` (``head`` is required)."""
    if not head:
        raise ValueError(
            "a tri-encoder needs a head ('hadamard', 'concat' or 'hypernet'); "
            "without one the condition would be "
            "ignored (the C-STS reference code's silent default)"
        )
    model = load_sentence_model(backbone, pooling=pooling, max_length=max_length)
    if dropout is None:
        dropout = _config_dropout(model[0])
    model.append(
        ConditionHead(model.get_embedding_dimension(), kind=head, transform=transform, dropout=dropout, rank=rank).to(
            model.device
        )
    )
    return model


def build_cross_encoder(
    backbone: str,
    *,
    head: str | None = "linear",
    pooling: str | None = None,
    transform: bool = False,
    dropout: float | None = None,
    max_length: int | None = None,
) -> Any:
    """A one-output ``CrossEncoder`` with identity activation (the raw regression score, as in the reference).

    Args:
        head: ``linear`` (default; None means the same): the C-STS reference head. The backbone runs without its
            pretrained pooler; the pooled token output (``pooling``, default ``cls``) goes through the optional
            ``transform`` MLP (Dropout → Linear(h, h) → GELU), then Dropout → Linear(h, 1). It is made of
            sentence-transformers modules (Transformer, Pooling, Dropout, Dense writing ``scores``), so the saved
            model reloads with plain ``CrossEncoder(path)``.
            ``sequence-classification``: transformers' ``AutoModelForSequenceClassification`` head, fixed by the
            architecture: for BERT-style models (MiniLM) the pretrained pooler (Linear + Tanh on [CLS]) →
            Dropout → Linear(h, 1); for RoBERTa Dropout → Linear(h, h) → Tanh → Dropout → Linear(h, 1) on
            ``<s>``. ``pooling`` and ``transform`` do not apply to it.
        pooling: ``linear`` head only: any sentence-transformers pooling mode (``cls``, ``mean``, ``lasttoken``).
        transform: ``linear`` head only: insert the paper's transform MLP.
        dropout: ``linear`` head only: dropout of the head and the transform (default: the backbone's
            ``hidden_dropout_prob``, as the reference).
        max_length: maximum tokens of the ``(s1, s2 [SEP] c)`` pair; None keeps the backbone's.
    """
    from sentence_transformers import CrossEncoder

    head = head or "linear"
    if head not in CROSS_HEADS:
        raise ValueError(f"unknown cross-encoder head {head!r}; choose one of {list(CROSS_HEADS)}")
    if head == "sequence-classification":
        if pooling or transform or dropout is not None:
            raise ValueError(
                "pooling, transform and dropout do not apply to the cross-encoder head 'sequence-classification' "
                "(transformers' classification head is fixed by the architecture); use head 'linear'"
            )
        path = resolve_model_path(backbone)
        with readable_weights(path):
            model = CrossEncoder(path, num_labels=1, max_length=max_length, activation_fn=torch.nn.Identity())
        if max_length is not None:
            check_max_length(max_length, getattr(model, "config", None), backbone)
        return model

    from sentence_transformers.cross_encoder.modules import Dense
    from sentence_transformers.sentence_transformer.modules import Dropout, Pooling

    # the backbone's Transformer module (feature extraction: token embeddings, the pooler output is not used)
    transformer = load_sentence_model(backbone, max_length=max_length)[0]
    dim = transformer.get_embedding_dimension()
    p = _config_dropout(transformer) if dropout is None else float(dropout)
    modules: list[Any] = [transformer, Pooling(dim, pooling_mode=pooling_mode(pooling or "cls"))]
    if transform:
        modules += _transform_modules(dim, p)
    modules += [Dropout(p), Dense(dim, 1, activation_function=torch.nn.Identity(), module_output_name="scores")]
    return CrossEncoder(modules=modules, activation_fn=torch.nn.Identity())


def cross_second_text(model: Any, sentence2: str, condition: str | None) -> str:
    """The second text of a cross-encoder pair: ``s2 [SEP] c`` with the tokenizer's separator.

    The pair ``(s1, s2 [SEP] c)`` is tokenised as a text pair. The C-STS reference instead joins
    ``s1 [SEP] s2 [SEP] c`` into one string and tokenises it as a single sequence. For BERT-style tokenizers the
    tokens are the same (``[CLS] s1 [SEP] s2 [SEP] c [SEP]``) and only the segment ids of ``s2 [SEP] c`` differ
    (1 instead of 0); for RoBERTa-style tokenizers pair encoding also puts a double separator between the texts
    (``<s> s1 </s></s> s2 </s> c </s>`` instead of the reference's ``<s> s1 </s> s2 </s> c </s>``).
    """
    if condition is None:
        return sentence2
    sep = getattr(model.tokenizer, "sep_token", None) or "[SEP]"
    return f"{sentence2} {sep} {condition}"


# ---------------------------------------------------------------- prompt-based decoder LMs


class QLoRAUnavailableError(RuntimeError):
    """Raised when 4-bit QLoRA is requested without a CUDA GPU or without bitsandbytes."""


def _quantization_kwargs(quantize: str | None) -> dict[str, Any]:
    """The model keywords of 4-bit QLoRA; :class:`QLoRAUnavailableError` without a CUDA GPU or bitsandbytes."""
    if quantize is None:
        return {}
    if quantize != "4bit":
        raise ValueError(f"quantize must be None or '4bit', got {quantize!r}")
    import importlib.util

    missing = []
    if not torch.cuda.is_available():
        missing.append("a CUDA GPU (torch.cuda.is_available() is False)")
    if importlib.util.find_spec("bitsandbytes") is None:
        missing.append("the bitsandbytes package (pip install bitsandbytes)")
    if missing:
        raise QLoRAUnavailableError(
            "4-bit QLoRA needs " + " and ".join(missing) + "; use LoRA without quantization (quantize=None)."
        )
    from transformers import BitsAndBytesConfig

    return {
        "quantization_config": BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32,
        )
    }


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

    model_kwargs = _quantization_kwargs(quantize)
    path = resolve_model_path(model_name_or_path)
    if (Path(path) / "modules.json").is_file():
        model = load_with_finesim_modules(path, device=device, model_kwargs=model_kwargs or None)
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
