"""Seeded in-context demonstration sampling, from the training split only.

C-STS: demonstrations come in contrasting pairs. Training rows are grouped by sentence pair with
:func:`finesim.data.pair_conditions`; for each query, ``ceil(k/2)`` distinct pairs are drawn and each
contributes its high-condition row then its low-condition row; the list is cut to ``k`` (so an odd ``k`` ends
with a lone high row). STS-B: ``k`` distinct training rows are drawn.

Draws use one ``random.Random(seed)`` consumed query after query, so the same seed, training file and query
order give the same prompts, and the first ``n`` queries of a run get the same demonstrations as in a
``--limit n`` run.
"""

from __future__ import annotations

import random
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
            self._pairs = [
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
            available = len(self._pairs)
            needed = (k + 1) // 2
            unit = "sentence pairs with two conditions"
        else:
            cols = train.select_columns(["sentence1", "sentence2", "label"]).to_dict()
            self._rows = [
                Example(s1, s2, None, float(y))
                for s1, s2, y in zip(cols["sentence1"], cols["sentence2"], cols["label"])
            ]
            available = len(self._rows)
            needed = k
            unit = "rows"
        if needed > available:
            raise ValueError(f"k={k} needs {needed} training {unit}, the training data has {available}")

    def draw(self) -> list[Example]:
        """The demonstrations for the next query."""
        if self.k == 0:
            return []
        if self.task == "csts":
            chosen = self._rng.sample(range(len(self._pairs)), (self.k + 1) // 2)
            return [ex for i in chosen for ex in self._pairs[i]][: self.k]
        return [self._rows[i] for i in self._rng.sample(range(len(self._rows)), self.k)]

    def describe(self) -> dict[str, Any]:
        """Settings and pairing facts for a results file."""
        out: dict[str, Any] = {"k": self.k, "seed": self.seed, "source": "train split only"}
        if self.task == "csts":
            out["scheme"] = "ceil(k/2) random condition pairs, high then low, cut to k"
            out["pairing"] = self.pairing_report
        else:
            out["scheme"] = "k distinct random rows"
        return out
