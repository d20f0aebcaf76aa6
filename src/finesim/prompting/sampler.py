"""Seeded in-context demonstration sampling, from the training split only.

C-STS: demonstrations come in contrasting pairs. Training rows are grouped by sentence pair with
:func:`finesim.data.pair_conditions`; for each query, ``ceil(k/2)`` distinct pairs are drawn and each
contributes its high-condition row then its low-condition row; the list is cut to ``k`` (so an odd ``k`` ends
with a lone high row). STS-B: ``k`` distinct training rows are drawn.

Draws use one ``random.Random(seed)`` consumed query after query, so the same seed, training file and query
order give the same prompts, and the first ``n`` queries of a run get the same demonstrations as in a
``--limit n`` run.

A query never sees its own sentence pair as a demonstration: when the training data holds the query's
``(sentence1, sentence2)`` (in either order; e.g. ``--train-file`` is the evaluated file, or the files overlap),
those candidates are left out of that query's draw, and the queries and candidates concerned are counted
(:meth:`DemonstrationSampler.describe`). Queries whose pair is not in the training data draw exactly as before.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from datasets import Dataset

from finesim.data import pair_conditions
from finesim.prompting.prompts import Example


class DemonstrationSampler:
    """Draw ``k`` labelled demonstrations per query from a training dataset.

    Args:
        train: training rows (sentence1, sentence2, label; plus condition for C-STS).
        task: ``"csts"`` (paired high/low demonstrations) or ``"stsb"`` (independent rows).
        k: number of demonstrations per query (0 allowed).
        seed: seed of the sampler's private ``random.Random``.
    """

    def __init__(self, train: Dataset, *, task: str, k: int, seed: int = 42) -> None:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if task not in ("csts", "stsb"):
            raise ValueError(f"unknown task {task!r}; choose 'csts' or 'stsb'")
        self.task = task
        self.k = k
        self.seed = seed
        self._rng = random.Random(seed)
        self.pairing_report: dict[str, Any] | None = None
        if task == "csts":
            pairs, report = pair_conditions(train, equal_labels="keep")
            self.pairing_report = report.as_dict()
            cols = pairs.to_dict()  # column lists: row-by-row Dataset access is slow
            # what one draw contributes: a C-STS pair's high then low row; an STS-B row alone
            self._groups: list[tuple[Example, ...]] = [
                (Example(s1, s2, ch, float(lh)), Example(s1, s2, cl, float(ll)))
                for s1, s2, ch, lh, cl, ll in zip(
                    cols["sentence1"],
                    cols["sentence2"],
                    cols["condition_high"],
                    cols["label_high"],
                    cols["condition_low"],
                    cols["label_low"],
                )
            ]
            needed = (k + 1) // 2
            unit = "sentence pairs with two conditions"
        else:
            cols = train.select_columns(["sentence1", "sentence2", "label"]).to_dict()
            self._groups = [
                (Example(s1, s2, None, float(y)),)
                for s1, s2, y in zip(cols["sentence1"], cols["sentence2"], cols["label"])
            ]
            needed = k
            unit = "rows"
        if needed > len(self._groups):
            raise ValueError(f"k={k} needs {needed} training {unit}, the training data has {len(self._groups)}")
        self._needed = needed
        self.unit = unit
        self._by_sentences: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, (ex, *_) in enumerate(self._groups):
            self._by_sentences[(ex.sentence1, ex.sentence2)].append(i)
        self.queries_with_own_pair = 0
        self.excluded_candidates = 0

    def _own(self, query: tuple[str, str]) -> set[int]:
        s1, s2 = query
        return set(self._by_sentences.get((s1, s2), ())) | set(self._by_sentences.get((s2, s1), ()))

    def draw(self, query: tuple[str, str] | None = None) -> list[Example]:
        """The demonstrations for the next query, never from the query's own sentence pair ``(s1, s2)``."""
        if self.k == 0:
            return []
        size = len(self._groups)
        own = self._own(query) if query is not None else set()
        if own:
            self.queries_with_own_pair += 1
            self.excluded_candidates += len(own)
            pool = [i for i in range(size) if i not in own]
            if len(pool) < self._needed:
                raise ValueError(
                    f"k={self.k} needs {self._needed} training {self.unit} other than the query's own sentence "
                    f"pair {query!r}; the training data has {len(pool)}"
                )
            chosen = self._rng.sample(pool, self._needed)
        else:
            chosen = self._rng.sample(range(size), self._needed)
        return [ex for i in chosen for ex in self._groups[i]][: self.k]

    def describe(self) -> dict[str, Any]:
        """Settings, pairing facts and own-pair exclusions for a results file."""
        out: dict[str, Any] = {"k": self.k, "seed": self.seed, "source": "train split only"}
        if self.task == "csts":
            out["scheme"] = "ceil(k/2) random condition pairs, high then low, cut to k"
            out["pairing"] = self.pairing_report
        else:
            out["scheme"] = "k distinct random rows"
        out["own_pair_excluded"] = {
            "queries": self.queries_with_own_pair,
            "candidates": self.excluded_candidates,
            "unit": self.unit,
        }
        return out
