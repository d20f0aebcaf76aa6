"""Request bodies of the scoring endpoints and the checks FastAPI's parsing does not do.

Pydantic checks the types (strict strings: a number is not a text) and missing fields; :func:`checked_texts`
adds finesim's text check (:func:`finesim.evaluation.inputs.check_texts`: no empty text), the item and length
limits, and :func:`row_conditions` the condition rules. Every failure is an :class:`ApiError` 422.

Every body refuses a field it does not have (``extra="forbid"``: a misspelt ``conditon`` is a 422 naming the field
and the closest right name, :func:`finesim.serving.errors.validation_message`), never ignores it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator

from finesim.evaluation.inputs import check_texts
from finesim.serving.errors import VALIDATION, ApiError


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown field is a 422, never ignored


class SimilarityRequest(_Body):
    """``POST /similarity``: score ``(sentence1[i], sentence2[i])`` under ``condition`` (one for all pairs, or one
    per pair)."""

    sentence1: list[StrictStr]
    sentence2: list[StrictStr]
    condition: StrictStr | list[StrictStr] | None = None


class RerankRequest(_Body):
    """``POST /rerank``: order ``texts`` by their similarity to ``query`` under ``condition``."""

    query: StrictStr
    texts: list[StrictStr]
    condition: StrictStr | None = None
    top_n: Annotated[int, Field(ge=1, strict=True)] | None = None


SEARCH_CONDITION_HINT = (
    'send the condition to search under, or "condition": null for the plain similarity ranking (the texts alone, '
    "without a condition)"
)


class SearchRequest(_Body):
    """``POST /search``: the ``k`` texts of the loaded index most similar to ``query`` under ``condition``, or
    without one when ``condition`` is an explicit null (``ConditionalIndex.search(query, None)``: the plain
    similarity of the texts alone); ``where`` keeps only rows whose metadata has each key with that value
    (``ConditionalIndex.search(..., where=...)``). ``condition`` is required (and nullable, so the OpenAPI schema
    says both): a body without it is a 422 ending in :data:`SEARCH_CONDITION_HINT` (:func:`missing_hints`), so a
    forgotten field never turns into an unconditioned search."""

    query: StrictStr
    condition: StrictStr | None = Field(description=SEARCH_CONDITION_HINT)
    k: Annotated[int, Field(ge=1, strict=True)] = 10
    where: dict[StrictStr, StrictStr | StrictBool | StrictInt | StrictFloat | None] | None = None


TOKEN_IDS_MESSAGE = (
    "input is token ids, but this server embeds text with its own model's tokenizer (ids from another tokenizer, "
    "such as OpenAI's tiktoken, mean other words): send the texts as strings. LangChain's OpenAIEmbeddings sends "
    "token ids by default: create it with check_embedding_ctx_length=False"
)


def _is_token_ids(value: Any) -> bool:
    """Whether ``value`` is a list of ints or a list of lists of ints (OpenAI's token-array inputs)."""

    def ints(items: Any) -> bool:
        return isinstance(items, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in items)

    if not isinstance(value, list) or not value:
        return False
    return ints(value) or all(ints(item) and item for item in value)


class EmbeddingsRequest(_Body):
    """``POST /v1/embeddings`` (OpenAI-compatible). OpenAI's fields: ``input`` (strings only: token ids are refused
    with :data:`TOKEN_IDS_MESSAGE`), ``model`` (ignored), ``encoding_format``, ``dimensions`` (only the model's own
    dimension: embeddings are not truncated), ``user`` (ignored); finesim's ``condition``. Any other field is a 422."""

    input: StrictStr | list[StrictStr]
    model: str | None = None
    condition: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1, strict=True)] | None = None
    user: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _no_token_ids(cls, value: Any) -> Any:
        if _is_token_ids(value):
            raise ValueError(TOKEN_IDS_MESSAGE)  # 422 "input: ..." (the prefix pydantic adds is removed)
        return value


BODIES: dict[str, type[BaseModel]] = {
    "/similarity": SimilarityRequest,
    "/rerank": RerankRequest,
    "/search": SearchRequest,
    "/v1/embeddings": EmbeddingsRequest,
}
"""The body of each POST endpoint: its fields name the right one when a request sends an unknown field."""


def body_fields() -> dict[str, list[str]]:
    """The fields of each POST endpoint's body, by path."""
    return {path: sorted(model.model_fields) for path, model in BODIES.items()}


def missing_hints() -> dict[str, dict[str, str]]:
    """What to do about each required field left out, by path and field: a body field's ``description``; the 422
    of a body without it is ``FIELD: Field required: DESCRIPTION``
    (:func:`finesim.serving.errors.validation_message`)."""
    return {
        path: {name: f.description for name, f in model.model_fields.items() if f.is_required() and f.description}
        for path, model in BODIES.items()
    }


def checked_dimensions(dimensions: int | None, model_dimension: int | None) -> None:
    """``dimensions`` of ``/v1/embeddings``: left out, or the model's own dimension. Truncating an embedding to its
    first N components (then re-normalising) is only faithful for a model trained for it (Matryoshka); finesim does not
    assume that, so any other value is a 422 saying the model's dimension."""
    if dimensions is None or dimensions == model_dimension:
        return
    raise invalid(
        f"dimensions is {dimensions}, but this model's embeddings have {model_dimension} dimensions and finesim does "
        f"not shorten them (only a model trained for truncation, Matryoshka-style, keeps its quality when cut): "
        f"leave dimensions out or send {model_dimension}"
    )


def invalid(message: str) -> ApiError:
    """A 422 ``Validation`` error."""
    return ApiError(422, message, VALIDATION)


def checked_texts(texts: Any, field: str, *, max_items: int, max_chars: int) -> list[str]:
    """``texts`` checked: 1 to ``max_items`` non-empty strings of valid Unicode of at most ``max_chars`` characters.
    A single string (a field that takes one, such as ``/search``'s ``query``) is named without a position."""
    if isinstance(texts, str):
        return _checked_one(texts, field, max_chars=max_chars)
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


def _checked_one(text: str, field: str, *, max_chars: int) -> list[str]:
    try:
        checked_texts([text], field, max_items=1, max_chars=max_chars)
    except ApiError as err:
        err.message = err.message.replace(f"{field}[0]", field, 1)
        raise
    return [text]


def checked_condition(condition: str | None, field: str, *, max_chars: int) -> str | None:
    """One condition string checked like a text (None stays None)."""
    if condition is None:
        return None
    return checked_texts(condition, field, max_items=1, max_chars=max_chars)[0]


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
