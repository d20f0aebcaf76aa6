"""Conditional similarity models of the C-STS paper: bi-, cross- and tri-encoders.

- **bi**: a plain ``SentenceTransformer`` fed ``(sentence, condition)`` text pairs (``[CLS] s [SEP] c
  [SEP]``); score ``cos(f(s1, c), f(s2, c))``. It loads in sentence-transformers without finesim.
- **cross**: a sentence-transformers ``CrossEncoder`` with one output and no activation, fed the text pair
  ``(s1, s2 [SEP] c)``, i.e. the tokens ``[CLS] s1 [SEP] s2 [SEP] c [SEP]`` of the reference code's joined
  string (the reference tokenises it as one segment; here ``s2 [SEP] c`` is segment 1, the only difference).
  Its head (:data:`CROSS_HEADS`) is by default the reference's: pooled ``[CLS]`` → [transform] → Dropout →
  Linear(h, 1), built from sentence-transformers' own modules, so ``CrossEncoder(path)`` reloads it.
- **tri**: a ``SentenceTransformer`` whose last module is a :class:`~finesim.models.heads.ConditionHead`;
  sentences and condition go separately through the shared backbone and the head fuses them.

Every model folder saved by finesim carries ``finesim_model.json`` naming its encoder type, so
:func:`load_conditional_model` can reload it and :class:`ConditionalScorer` can score with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from finesim.evaluation.scoring import EmbeddingScorer
from finesim.models.heads import ConditionHead, find_condition_head
from finesim.models.loading import load_sentence_model, resolve_model_path
from finesim.results import write_json_atomic

ENCODER_TYPES = ("bi", "cross", "tri")
MARKER_FILE = "finesim_model.json"  # = finesim.models.registry.MODEL_CARD_FILE
MODEL_TYPE_PREFIX = "csts-"  # model_type "csts-bi" | "csts-cross" | "csts-tri" in the model card
# cross-encoder heads: "linear" = the C-STS reference's (no pretrained pooler), "sequence-classification" =
# transformers' AutoModelForSequenceClassification head (BERT keeps its pretrained pooler Linear + Tanh)
CROSS_HEADS = ("linear", "sequence-classification")


def _check_encoder(encoder: str) -> str:
    if encoder not in ENCODER_TYPES:
        raise ValueError(f"unknown encoder type {encoder!r}; choose one of {list(ENCODER_TYPES)}")
    return encoder


def _config_dropout(transformer: Any) -> float:
    """The backbone's ``hidden_dropout_prob`` (0.1 when it has none): the dropout of the reference's heads."""
    return float(getattr(transformer.auto_model.config, "hidden_dropout_prob", 0.1) or 0.1)


def _transform_modules(dim: int, dropout: float) -> list[Any]:
    """The paper's "transform" MLP after pooling, ``Dropout → Linear(h, h) → GELU``, as sentence-transformers
    modules (they act on ``sentence_embedding``)."""
    from sentence_transformers.sentence_transformer.modules import Dense, Dropout

    return [Dropout(dropout), Dense(dim, dim, activation_function=torch.nn.GELU())]


def _add_transform(model: Any) -> None:
    """Append the transform MLP to a bi-encoder."""
    for module in _transform_modules(model.get_embedding_dimension(), _config_dropout(model[0])):
        model.append(module)


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
        _add_transform(model)
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
        dropout = float(getattr(model[0].auto_model.config, "hidden_dropout_prob", 0.1) or 0.1)
    model.append(
        ConditionHead(model.get_embedding_dimension(), kind=head, transform=transform, dropout=dropout, rank=rank)
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
        return CrossEncoder(path, num_labels=1, max_length=max_length, activation_fn=torch.nn.Identity())

    from sentence_transformers.cross_encoder.modules import Dense
    from sentence_transformers.sentence_transformer.modules import Dropout, Pooling

    from finesim.models.loading import pooling_mode

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
    """The second text of a cross-encoder pair: ``s2 [SEP] c`` with the tokenizer's separator."""
    if condition is None:
        return sentence2
    sep = getattr(model.tokenizer, "sep_token", None) or "[SEP]"
    return f"{sentence2} {sep} {condition}"


def encoder_type_of(model: Any) -> str:
    """Infer ``bi``/``cross``/``tri`` from a loaded model object."""
    from sentence_transformers import CrossEncoder

    if isinstance(model, CrossEncoder):
        return "cross"
    return "tri" if find_condition_head(model) is not None else "bi"


def write_marker(folder: str | Path, encoder: str, extra: dict[str, Any] | None = None) -> None:
    """Write ``finesim_model.json`` (the model-registry card: ``model_type`` ``csts-<encoder>`` and ``encoder``)."""
    payload = {"model_type": MODEL_TYPE_PREFIX + _check_encoder(encoder), "encoder": encoder, **(extra or {})}
    write_json_atomic(Path(folder, MARKER_FILE), payload)


def save_conditional_model(model: Any, folder: str | Path, *, encoder: str | None = None) -> Path:
    """Save a model and its finesim marker; returns the folder."""
    encoder = encoder or encoder_type_of(model)
    model.save_pretrained(str(folder))
    write_marker(folder, encoder)
    return Path(folder)


def load_conditional_model(path: str | Path, *, encoder: str | None = None, device: str | None = None) -> Any:
    """Load a model saved by finesim (or any ST / CrossEncoder folder when ``encoder`` is given)."""
    folder = Path(path)
    if encoder is None:
        marker = folder / MARKER_FILE
        if not marker.is_file():
            raise FileNotFoundError(
                f"{marker} not found: pass encoder='bi'|'cross'|'tri' to load a model finesim did not save"
            )
        card = json.loads(marker.read_text(encoding="utf-8"))
        encoder = card.get("encoder") or str(card.get("model_type", "")).removeprefix(MODEL_TYPE_PREFIX)
    _check_encoder(str(encoder))
    if encoder == "cross":
        from sentence_transformers import CrossEncoder

        return CrossEncoder(str(folder), device=device, activation_fn=torch.nn.Identity())
    from finesim.models.projection_head import load_model_with_projection_head

    # finesim's module classes (condition, projection and regression heads, e.g. after CCL or regression
    # training) are resolved directly instead of asking for trust_remote_code=True, which would also let the
    # backbone run code from the folder; a plain bi-encoder folder loads exactly as in sentence-transformers.
    model = load_model_with_projection_head(str(folder), device=device)
    if encoder == "tri" and find_condition_head(model) is None:
        raise ValueError(f"{folder} was declared a tri-encoder but has no ConditionHead module")
    return model


def _as_conditions(condition: str | Sequence[str] | None, n: int) -> list[str] | None:
    if condition is None:
        return None
    if isinstance(condition, str):
        return [condition] * n
    conditions = list(condition)
    if len(conditions) != n:
        raise ValueError(f"{n} sentence pairs but {len(conditions)} conditions")
    return conditions


class ConditionalScorer:
    """Score (sentence1, sentence2, condition) triples with any bi-, cross- or tri-encoder.

    Implements :class:`finesim.evaluation.scoring.PairScorer`, so ``finesim evaluate`` and the harness can use it.

    Args:
        model: a loaded model, or a path to a folder saved by finesim.
        encoder: the encoder type; inferred from the model when None.
        batch_size: inference batch size.
        show_progress: progress bars while encoding.
    """

    def __init__(
        self, model: Any, *, encoder: str | None = None, batch_size: int = 64, show_progress: bool = False
    ) -> None:
        if isinstance(model, (str, Path)):
            model = load_conditional_model(model, encoder=encoder)
        self.model = model
        self.encoder = _check_encoder(encoder or encoder_type_of(model))
        self.batch_size = batch_size
        self.show_progress = show_progress

    @property
    def prediction_range(self) -> tuple[float, float] | None:
        """Bi- and tri-encoders score by cosine, comparable with labels on [0, 1] as it is; a cross-encoder's
        regression output is on whatever scale it was trained on (unknown here: None)."""
        return None if self.encoder == "cross" else (0.0, 1.0)

    def score(
        self,
        sentences1: Sequence[str],
        sentences2: Sequence[str],
        conditions: Sequence[str] | None = None,
    ) -> np.ndarray:
        """One score per triple: cosine for bi/tri encoders, the raw regression output for cross-encoders."""
        if len(sentences1) != len(sentences2):
            raise ValueError(f"{len(sentences1)} first sentences but {len(sentences2)} second sentences")
        conds = _as_conditions(conditions, len(sentences1))
        if len(sentences1) == 0:
            return np.zeros(0, dtype=np.float32)
        if self.encoder == "bi":
            scorer = EmbeddingScorer(
                self.model,
                condition_mode="pair",
                batch_size=self.batch_size,
                show_progress=self.show_progress,
            )
            return scorer.score(sentences1, sentences2, conds)
        if self.encoder == "cross":
            second = [
                cross_second_text(self.model, s2, None if conds is None else conds[i])
                for i, s2 in enumerate(sentences2)
            ]
            pairs = list(zip(sentences1, second))
            out = self.model.predict(
                pairs, batch_size=self.batch_size, show_progress_bar=self.show_progress, convert_to_numpy=True
            )
            return np.asarray(out, dtype=np.float32).reshape(-1)
        return self._score_tri(sentences1, sentences2, conds)

    def _score_tri(
        self, sentences1: Sequence[str], sentences2: Sequence[str], conditions: list[str] | None
    ) -> np.ndarray:
        if conditions is None:
            raise ValueError("a tri-encoder needs a condition for every pair")
        head = find_condition_head(self.model)
        assert head is not None
        unique = list(dict.fromkeys([*sentences1, *sentences2, *conditions]))
        position = {text: i for i, text in enumerate(unique)}
        was_training = self.model.training
        self.model.eval()
        try:
            emb = self.model.encode(
                unique,
                batch_size=self.batch_size,
                convert_to_tensor=True,
                show_progress_bar=self.show_progress,
            ).float()
            with torch.no_grad():
                c = emb[[position[x] for x in conditions]]
                a = head.fuse(emb[[position[x] for x in sentences1]], c)
                b = head.fuse(emb[[position[x] for x in sentences2]], c)
                scores = torch.nn.functional.cosine_similarity(a, b, dim=-1)
        finally:
            self.model.train(was_training)
        return scores.cpu().numpy()

    def similarity(
        self,
        sentences1: Sequence[str] | str,
        sentences2: Sequence[str] | str,
        condition: Sequence[str] | str | None = None,
    ) -> np.ndarray:
        """Batch scoring; a single string condition applies to every pair, single sentences are allowed."""
        s1 = [sentences1] if isinstance(sentences1, str) else list(sentences1)
        s2 = [sentences2] if isinstance(sentences2, str) else list(sentences2)
        return self.score(s1, s2, _as_conditions(condition, len(s1)))


def _load_for_registry(path: str, *, device: str | None = None, max_length: int | None = None, **ignored: Any) -> Any:
    """``finesim.models.registry`` loader: a :class:`ConditionalScorer` (a ``PairScorer``) for ``finesim evaluate``."""
    import logging

    if ignored.get("pooling") is not None:
        logging.getLogger("finesim.models").warning(
            "pooling=%r ignored: %s keeps its trained pooling", ignored["pooling"], path
        )
    model = load_conditional_model(path, device=device)
    if max_length is not None:
        model.max_seq_length = max_length
    return ConditionalScorer(model)


def _register_model_types() -> None:
    from finesim.models.registry import register_model_type

    for encoder in ENCODER_TYPES:
        register_model_type(MODEL_TYPE_PREFIX + encoder, _load_for_registry)


_register_model_types()
