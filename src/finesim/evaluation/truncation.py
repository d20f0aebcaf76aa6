"""Counting the inputs a model truncates: texts (or text pairs) longer than its token limit (``max_seq_length``).

A model reads only the first tokens of a longer text, as everywhere in sentence-transformers, without a word; finesim
counts those rows and says so once (``finesim score``, ``finesim evaluate``). :class:`Truncation` knows which texts
each model type tokenizes and tokenizes only those long enough to pass the limit.
"""

from __future__ import annotations

from typing import Any


class Truncation:
    """Counts the rows whose text (or text pair) is longer than what the model reads, which it truncates.

    The texts each model tokenizes are those of :class:`~finesim.evaluation.scoring.ConditionalScorer`: a
    bi-encoder's ``(sentence, condition)`` pairs (a sentence alone without a condition), a tri-encoder's sentences and
    conditions alone, a cross-encoder's ``(sentence1, sentence2 [SEP] condition)``; an ensemble's members each. A
    text is tokenized only when it is long enough to pass the limit (a text of n UTF-8 bytes has at most 2n tokens),
    and a long one by its first ``16 x limit`` characters (the whole text only if they are within the limit): the
    count costs little next to the model.
    """

    def __init__(self, checks: list[tuple[str, Any, int]]) -> None:
        self.checks = checks
        self.limits = sorted({limit for _, _, limit in checks})
        self.limit = self.limits[0]  # the smallest
        self.rows = 0
        self.first: int | None = None

    @classmethod
    def of(cls, scorer: Any) -> Truncation | None:
        """The counter for ``scorer``; None when its limit cannot be told (a CASE model, Ray actors, a scorer that
        is no finesim model)."""
        members = getattr(scorer, "members", None)
        checks = []
        for one in members if members is not None else [scorer]:
            check = _token_check(one)
            if check is None:
                return None
            checks.append(check)
        return cls(checks) if checks else None

    @classmethod
    def of_model(cls, encoder: str, model: Any) -> Truncation | None:
        """The counter for a bi-, tri- or cross-encoder ``model`` (a SentenceTransformer or CrossEncoder, as
        training builds it); None when its limit cannot be told."""
        from types import SimpleNamespace

        check = _token_check(SimpleNamespace(encoder=encoder, model=model))
        return None if check is None else cls([check])

    def check(
        self,
        rows: list[int],
        counts: list[int],
        sentences1: list[str],
        sentences2: list[str],
        conditions: list[str] | None,
    ) -> None:
        """Count the rows of a batch of distinct triples that the model truncates: triple ``i`` stands for
        ``counts[i]`` rows, the first of them row ``rows[i]``."""
        over = [False] * len(rows)
        for encoder, model, limit in self.checks:
            for texts, pairs in _model_inputs(encoder, model, sentences1, sentences2, conditions):
                for i, long in enumerate(_over_limit(model.tokenizer, limit, texts, pairs)):
                    over[i] = over[i] or long
        for row, count, long in zip(rows, counts, over):
            if long:
                self.rows += count
                self.first = row if self.first is None else min(self.first, row)

    def message(self, unit: str = "row") -> str:
        """What to tell the user; ``unit`` names what was counted (``row`` of a file, ``pair`` of a task)."""
        limit = (
            f"{self.limit}-token limit"
            if len(self.limits) == 1
            else "token limits (" + ", ".join(str(n) for n in self.limits) + ")"
        )
        models = "model's" if len(self.checks) == 1 else "ensemble's members'"
        rows, were = (f"1 {unit}", "was") if self.rows == 1 else (f"{self.rows} {unit}s", "were")
        return (
            f"{rows} {were} longer than the {models} {limit} and {were} truncated (the first is {unit} {self.first}): "
            "the model reads only the start of the text"
        )


def _token_check(scorer: Any) -> tuple[str, Any, int] | None:
    encoder = getattr(scorer, "encoder", None)
    mode = getattr(scorer, "condition_mode", None)
    if encoder is None and mode in ("pair", "ignore"):  # an EmbeddingScorer over a plain embedding model
        encoder = "bi" if mode == "pair" else "sentences"  # "ignore": the sentences alone, conditions dropped
    model: Any = getattr(scorer, "model", None)
    if encoder not in ("bi", "tri", "cross", "sentences") or getattr(model, "tokenizer", None) is None:
        return None
    if _prompted(model):  # a prompt-LM's template and sentence cap decide what is cut, not max_seq_length alone
        return None
    limit = getattr(model, "max_seq_length", None)  # a SentenceTransformer's and a CrossEncoder's
    if limit is None:
        limit = getattr(model.tokenizer, "model_max_length", None)
    if not isinstance(limit, int) or not 0 < limit < 1_000_000:
        return None
    return encoder, model, limit


def _prompted(model: Any) -> bool:
    """Whether ``model``'s first module wraps each text in a prompt template (a decoder-LM ``prompt-lm`` model)."""
    from finesim.models.prompt_transformer import PromptTransformer

    try:
        first = model[0]
    except (TypeError, IndexError, KeyError):
        return False
    return isinstance(first, PromptTransformer)


def _model_inputs(
    encoder: str, model: Any, s1: list[str], s2: list[str], conditions: list[str] | None
) -> list[tuple[list[str], list[str] | None]]:
    """The texts (and second texts of pairs) a model tokenizes for a batch, each list with one entry per row."""
    if encoder == "sentences":
        return [(s1, None), (s2, None)]
    if encoder == "tri":
        return [(s1, None), (s2, None), *([(list(conditions), None)] if conditions is not None else [])]
    if encoder == "cross":
        from finesim.models.builders import cross_second_text

        conds: list[str] | list[None] = conditions if conditions is not None else [None] * len(s2)
        return [(s1, [cross_second_text(model, b, c) for b, c in zip(s2, conds)])]
    if conditions is None:
        return [(s1, None), (s2, None)]
    return [(s1, list(conditions)), (s2, list(conditions))]


def _head(text: str, chars: int) -> str:
    """The first ``chars`` characters of ``text``, cut at a space after them (a word is not cut in two)."""
    if len(text) <= chars:
        return text
    space = text.find(" ", chars)
    return text if space < 0 else text[:space]


def _over_limit(tokenizer: Any, limit: int, texts: list[str], pairs: list[str] | None) -> list[bool]:
    """Whether each text (or text pair) is more than ``limit`` tokens, special tokens included."""

    def lengths(firsts: list[str], seconds: list[str] | None) -> list[int]:
        encoded = tokenizer(
            firsts,
            seconds,
            add_special_tokens=True,
            truncation=False,
            verbose=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        return [len(ids) for ids in encoded]

    def size(i: int) -> int:
        return len(texts[i].encode("utf-8")) + (len(pairs[i].encode("utf-8")) if pairs is not None else 0)

    out = [False] * len(texts)
    maybe = [i for i in range(len(texts)) if 2 * size(i) + 4 > limit]  # 2 tokens a byte, 4 special tokens at most
    if not maybe:
        return out
    chars = 16 * limit  # a long text's start tells, mostly: its tokens are at most the whole text's
    firsts = [_head(texts[i], chars) for i in maybe]
    seconds = [_head(pairs[i], chars) for i in maybe] if pairs is not None else None
    cut = []
    for j, (i, n) in enumerate(zip(maybe, lengths(firsts, seconds))):
        out[i] = n > limit
        if not out[i] and (
            firsts[j] != texts[i] or (seconds is not None and pairs is not None and seconds[j] != pairs[i])
        ):
            cut.append(i)
    if cut:  # a start within the limit says nothing of the rest (long words): the whole texts then
        whole = lengths([texts[i] for i in cut], [pairs[i] for i in cut] if pairs is not None else None)
        for i, n in zip(cut, whole):
            out[i] = n > limit
    return out
