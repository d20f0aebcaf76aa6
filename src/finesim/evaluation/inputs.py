"""The one check of a scorer's input, and the base class every finesim scorer shares.

:func:`check_pairs` validates a batch before any model sees it: the sentence lists have one entry per pair, the
condition is one string for all pairs or one per pair, and every text is a non-empty string (an error names the list
and the position). :class:`ScorerBase` runs it in ``score`` and hands the checked lists to the subclass's
``_score``; an empty batch scores to an empty array.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def check_texts(texts: Sequence[Any], what: str) -> list[str]:
    """``texts`` as a list, every item a non-empty string of valid Unicode (a lone UTF-16 surrogate such as the JSON
    escape ``"\\ud800"`` has no UTF-8 form: tokenizers fail on it with an error naming nothing); a ``ValueError`` names
    ``what`` and the position."""
    if isinstance(texts, str):
        raise ValueError(f"{what} must be a list of strings, got a single string")
    if not isinstance(texts, Iterable):
        raise ValueError(f"{what} must be a list of strings, got {type(texts).__name__}")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise ValueError(f"{what}[{i}] is {type(text).__name__}, not a string")
        if not text.strip():
            raise ValueError(f"{what}[{i}] is empty")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(
                f"{what}[{i}] is not valid Unicode: a lone surrogate {text[err.start]!r} at character {err.start}"
            ) from None
    return out


def check_pairs(
    sentences1: Sequence[Any],
    sentences2: Sequence[Any],
    conditions: str | Sequence[Any] | None = None,
    *,
    require_condition: bool = False,
) -> tuple[list[str], list[str], list[str] | None]:
    """Checked ``(sentences1, sentences2, conditions)`` lists; a single condition string applies to every pair.

    Raises:
        ValueError: lengths differ, a condition is required and missing, or a text is empty or not a string.
    """
    s1, s2 = check_texts(sentences1, "sentences1"), check_texts(sentences2, "sentences2")
    if conditions is None and require_condition:
        raise ValueError("this model scores sentence pairs under a condition: pass conditions")
    if conditions is None or isinstance(conditions, str):
        if len(s1) != len(s2):
            raise ValueError(f"{len(s1)} first sentences but {len(s2)} second sentences")
        conds = None if conditions is None else check_texts([conditions], "condition") * len(s1)
        return s1, s2, conds
    conds = check_texts(conditions, "conditions")
    if not len(s1) == len(s2) == len(conds):
        raise ValueError(f"{len(s1)} first sentences, {len(s2)} second sentences, {len(conds)} conditions")
    return s1, s2, conds


class ScorerBase:
    """A :class:`~finesim.evaluation.scoring.PairScorer` whose ``score`` checks its input (:func:`check_pairs`)
    before ``_score`` runs; subclasses set ``requires_condition`` when a condition is mandatory."""

    requires_condition: bool = False

    def score(
        self, sentences1: Sequence[str], sentences2: Sequence[str], conditions: Sequence[str] | None = None
    ) -> np.ndarray:
        """One similarity score per pair (higher = more similar)."""
        s1, s2, conds = check_pairs(sentences1, sentences2, conditions, require_condition=self.requires_condition)
        if not s1:
            return np.zeros(0, dtype=np.float32)
        return self._score(s1, s2, conds)

    def _score(self, sentences1: list[str], sentences2: list[str], conditions: list[str] | None) -> np.ndarray:
        raise NotImplementedError

    def similarity(
        self,
        sentences1: Sequence[str] | str,
        sentences2: Sequence[str] | str,
        condition: Sequence[str] | str | None = None,
    ) -> np.ndarray:
        """Batch scoring: one score per pair ``(sentences1[i], sentences2[i])``; a single string condition applies to
        every pair, and a single string sentence is a list of one (it is not repeated to match the other side)."""
        s1 = [sentences1] if isinstance(sentences1, str) else check_texts(sentences1, "sentences1")
        s2 = [sentences2] if isinstance(sentences2, str) else check_texts(sentences2, "sentences2")
        if condition is not None and not isinstance(condition, (str, Iterable)):
            raise ValueError(f"condition must be a string or a list of strings, got {type(condition).__name__}")
        return self.score(s1, s2, condition)
