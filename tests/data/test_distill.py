"""Distillation triples (finesim.data.distill): counts and mix computed by hand on small tables, no duplicate (either
order of a pair), no dev sentence in any triple, seeded determinism, errors that say the most a table can give."""

from __future__ import annotations

from collections import Counter

import pytest
from datasets import Dataset

from finesim.data.distill import build_distillation_triples
from finesim.data.splits import split_by_pair


def _table(rows: list[tuple[str, str, str]]) -> Dataset:
    return Dataset.from_dict(
        {
            "sentence1": [r[0] for r in rows],
            "sentence2": [r[1] for r in rows],
            "condition": [r[2] for r in rows],
            "label": [float(i % 5 + 1) for i in range(len(rows))],
            "row": list(range(1, len(rows) + 1)),
        }
    )


# three sentence pairs, two conditions each, five conditions in all; the last row repeats the first pair reversed
SMALL = [
    ("A", "B", "c1"),
    ("A", "B", "c2"),
    ("C", "D", "c3"),
    ("C", "D", "c4"),
    ("E", "F", "c1"),
    ("E", "F", "c5"),
    ("B", "A", "c1"),
]


def _triples(result) -> list[tuple[str, str, str, str]]:
    t = result.triples
    return list(zip(t["sentence1"], t["sentence2"], t["condition"], t["kind"]))


def test_counts_and_mix_by_hand() -> None:
    # size 20, new pairs 0.25: 5 new pairs; the 6 distinct own rows (B,A,c1 repeats A,B,c1); 20 - 5 - 6 = 9 triples
    # under other conditions. Each pair has 5 - 2 = 3 conditions left, 9 in all: every pair gets all three.
    result = build_distillation_triples(_table(SMALL), size=20, seed=3, new_pair_fraction=0.25, dev_fraction=None)
    triples = _triples(result)
    assert result.report["counts"] == {"own": 6, "other-condition": 9, "new-pair": 5, "total": 20}
    assert result.report["dropped"] == {
        "rows_sharing_a_dev_sentence": 0,
        "pairs_sharing_a_dev_sentence": 0,
        "duplicate_rows": 1,
    }
    assert result.report["pools"] == {"sentences": 6, "conditions": 5, "pairs": 3}
    assert Counter(k for *_, k in triples) == {"own": 6, "other-condition": 9, "new-pair": 5}
    assert {t[:3] for t in triples if t[3] == "own"} == set(SMALL[:6])
    other = {t[:3] for t in triples if t[3] == "other-condition"}
    assert other == {
        ("A", "B", "c3"),
        ("A", "B", "c4"),
        ("A", "B", "c5"),
        ("C", "D", "c1"),
        ("C", "D", "c2"),
        ("C", "D", "c5"),
        ("E", "F", "c2"),
        ("E", "F", "c3"),
        ("E", "F", "c4"),
    }
    training_pairs = {frozenset("AB"), frozenset("CD"), frozenset("EF")}
    new = [t for t in triples if t[3] == "new-pair"]
    for s1, s2, c, _ in new:
        assert s1 != s2 and {s1, s2} <= set("ABCDEF") and c in {"c1", "c2", "c3", "c4", "c5"}
        assert frozenset((s1, s2)) not in training_pairs
    assert len({frozenset(t[:2]) for t in new}) == 5  # five different pairs
    # no triple twice, a pair in either order counting as the same
    assert len({(frozenset(t[:2]), t[2]) for t in triples}) == 20


def test_other_conditions_are_spread_evenly_over_the_pairs() -> None:
    # 3 pairs, 4 other-condition triples: 2 + 1 + 1 (each pair has 3 left)
    result = build_distillation_triples(_table(SMALL[:6]), size=10, seed=0, new_pair_fraction=0.0, dev_fraction=None)
    per_pair = Counter(frozenset(t[:2]) for t in _triples(result) if t[3] == "other-condition")
    assert sorted(per_pair.values()) == [1, 1, 2]


def test_a_size_below_the_own_rows_samples_them() -> None:
    result = build_distillation_triples(_table(SMALL[:6]), size=4, seed=0, new_pair_fraction=0.0, dev_fraction=None)
    triples = _triples(result)
    assert result.report["counts"] == {"own": 4, "other-condition": 0, "new-pair": 0, "total": 4}
    assert {t[3] for t in triples} == {"own"} and {t[:3] for t in triples} <= set(SMALL[:6])


def test_too_large_a_size_says_the_most_the_table_gives() -> None:
    with pytest.raises(ValueError, match=r"give only 9; size can be at most 20 at new_pair_fraction 0\.25"):
        build_distillation_triples(_table(SMALL), size=21, seed=3, new_pair_fraction=0.25, dev_fraction=None)
    # 6 sentences make 15 pairs, 3 of them training pairs: at most 12 new pairs
    with pytest.raises(ValueError, match=r"asks for 13 new sentence pairs, but the 6 training sentences make only 12"):
        build_distillation_triples(_table(SMALL), size=26, seed=0, new_pair_fraction=0.5, dev_fraction=None)


def test_every_possible_new_pair_can_be_drawn() -> None:
    result = build_distillation_triples(_table(SMALL), size=24, seed=1, new_pair_fraction=0.5, dev_fraction=None)
    new = {frozenset(t[:2]) for t in _triples(result) if t[3] == "new-pair"}
    assert len(new) == 12  # all 15 - 3 pairs


def test_seeded_and_deterministic() -> None:
    table = _table(SMALL)
    a = build_distillation_triples(table, size=20, seed=7, new_pair_fraction=0.25, dev_fraction=None)
    b = build_distillation_triples(table, size=20, seed=7, new_pair_fraction=0.25, dev_fraction=None)
    c = build_distillation_triples(table, size=20, seed=8, new_pair_fraction=0.25, dev_fraction=None)
    assert _triples(a) == _triples(b)
    assert _triples(a) != _triples(c)


# four pairs; A is in two of them, so a dev split taking (A,B) or (A,G) must drop the other from training
SHARED = [
    ("A", "B", "c1"),
    ("A", "B", "c2"),
    ("A", "G", "c3"),
    ("A", "G", "c4"),
    ("D", "E", "c1"),
    ("D", "E", "c3"),
    ("F", "H", "c2"),
    ("F", "H", "c4"),
]


@pytest.mark.parametrize("dev_seed", range(8))
def test_no_dev_sentence_reaches_a_triple(dev_seed: int) -> None:
    table = _table(SHARED)
    _, dev_rows = split_by_pair(table, 0.25, dev_seed)  # the split the recipe runner carves: one pair of four
    (dev_pair,) = set(zip(dev_rows["sentence1"], dev_rows["sentence2"]))
    sharing = {("A", "B"): 1, ("A", "G"): 1}.get(dev_pair, 0)  # training pairs that share a sentence with dev
    result = build_distillation_triples(
        table, size=8, seed=0, new_pair_fraction=0.25, dev_fraction=0.25, dev_seed=dev_seed
    )
    assert result.report["dev"] == {"fraction": 0.25, "seed": dev_seed, "pairs": 1, "rows": 2, "sentences": 2}
    assert result.report["dropped"]["pairs_sharing_a_dev_sentence"] == sharing
    assert result.report["dropped"]["rows_sharing_a_dev_sentence"] == 2 * sharing
    assert result.report["counts"]["own"] == 2 * (3 - sharing)
    # the dev rows are the split's, with their human labels
    assert result.dev is not None and result.dev.to_list() == dev_rows.to_list()
    used = {s for t in _triples(result) for s in t[:2]}
    assert not used & set(dev_pair)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"new_pair_fraction must be in \[0, 1\), got 1\.0"):
        build_distillation_triples(_table(SMALL), size=5, new_pair_fraction=1.0, dev_fraction=None)
    with pytest.raises(ValueError, match=r"size must be >= 1, got 0"):
        build_distillation_triples(_table(SMALL), size=0, dev_fraction=None)
    no_condition = _table(SMALL).remove_columns("condition")
    with pytest.raises(ValueError, match=r"have no \['condition'\] column"):
        build_distillation_triples(no_condition, size=5, dev_fraction=None)


@pytest.mark.parametrize("fraction", [0.0, 0.2, 0.35, 0.5, 0.9])
def test_the_largest_size_said_is_the_largest_that_fits(fraction: float) -> None:
    """The error said 'at most len(own) + capacity + n_new' with n_new of the size asked for: asked 200000 it said
    51790, asked 51790 it said 22148, and the real largest was 14738."""
    from finesim.data.distill import _largest_size

    for limit in (0, 1, 7, 11612, 11702):
        most = _largest_size(limit, fraction)
        fits = [size for size in range(0, 40 * limit + 10) if size - round(fraction * size) <= limit]
        assert most == max(fits)
