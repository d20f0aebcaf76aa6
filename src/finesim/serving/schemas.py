"""Request bodies of the scoring endpoints and the checks FastAPI's parsing does not do.

Pydantic checks the types (strict strings: a number is not a text) and missing fields; :func:`checked_texts`
adds finesim's text check (:func:`finesim.evaluation.inputs.check_texts`: no empty text), the item and length
limits, and :func:`row_conditions` the condition rules. Every failure is an :class:`ApiError` 422.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from finesim.evaluation.inputs import check_texts
from finesim.serving.errors import VALIDATION, ApiError


class SimilarityRequest(BaseModel):
    """``POST /similarity``: score ``(sentence1[i], sentence2[i])`` under ``condition`` (one for all pairs, or one
    per pair)."""

    model_config = ConfigDict(extra="forbid")

    sentence1: list[StrictStr]
    sentence2: list[StrictStr]
    condition: StrictStr | list[StrictStr] | None = None


class RerankRequest(BaseModel):
    """``POST /rerank``: order ``texts`` by their similarity to ``query`` under ``condition``."""

    model_config = ConfigDict(extra="forbid")

    query: StrictStr
    texts: list[StrictStr]
    condition: StrictStr | None = None
    top_n: Annotated[int, Field(ge=1, strict=True)] | None = None


class SearchRequest(BaseModel):
    """``POST /search``: the ``k`` texts of the loaded index most similar to ``query`` under ``condition``."""

    model_config = ConfigDict(extra="forbid")

    query: StrictStr
    condition: StrictStr
    k: Annotated[int, Field(ge=1, strict=True)] = 10


class EmbeddingsRequest(BaseModel):
    """``POST /v1/embeddings`` (OpenAI-compatible; other OpenAI fields such as ``user`` are ignored)."""

    model_config = ConfigDict(extra="ignore")

    input: StrictStr | list[StrictStr]
    model: str | None = None
    condition: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"


def invalid(message: str) -> ApiError:
    """A 422 ``Validation`` error."""
    return ApiError(422, message, VALIDATION)


def checked_texts(texts: Any, field: str, *, max_items: int, max_chars: int) -> list[str]:
    """``texts`` checked: 1 to ``max_items`` non-empty strings of at most ``max_chars`` characters."""
    if isinstance(texts, str):
        texts = [texts]
    if not texts:
        raise invalid(f"{field} is empty: send at least one text")
    if len(texts) > max_items:
        raise invalid(f"{field} has {len(texts)} items; the server takes at most {max_items} per request")
    try:
        out = check_texts(texts, field)
    except ValueError as err:
        raise invalid(str(err)) from None
    for i, text in enumerate(out):
        if len(text) > max_chars:
            raise invalid(f"{field}[{i}] has {len(text)} characters; the server's limit is {max_chars}")
    return out


def checked_condition(condition: str | None, field: str, *, max_chars: int) -> str | None:
    """One condition string checked like a text (None stays None)."""
    if condition is None:
        return None
    return checked_texts([condition], field, max_items=1, max_chars=max_chars)[0]


def row_conditions(condition: str | list[str] | None, rows: int, *, max_items: int, max_chars: int) -> list[str | None]:
    """One condition per row: a single string applies to every row; a list must have one per row."""
    if condition is None or isinstance(condition, str):
        return [checked_condition(condition, "condition", max_chars=max_chars)] * rows
    conds = checked_texts(condition, "condition", max_items=max_items, max_chars=max_chars)
    if len(conds) != rows:
        raise invalid(f"{rows} pairs but {len(conds)} conditions: send one condition, or one per pair")
    return list(conds)


def require_condition(scorer: Any, conditions: list[str | None], what: str) -> None:
    """Tri-encoders and CASE models score (and CASE models embed) only under a condition; so does an ensemble with
    such a member."""
    encoder = scorer.encoder
    if condition_required(scorer) and any(c is None for c in conditions):
        kind = {"tri": "a tri-encoder", "case": "a CASE model"}.get(encoder, "an ensemble with a member that needs one")
        raise invalid(f'this model is {kind}: it {what} only under a condition; send "condition"')


def condition_required(scorer: Any) -> bool:
    """Whether the server scores with ``scorer`` only under a condition: a tri-encoder, a CASE model, or an ensemble
    with one of those among its members."""
    return bool(getattr(scorer, "requires_condition", False))
