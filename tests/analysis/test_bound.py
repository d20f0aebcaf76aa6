"""The contrastive ceiling: the paper's closed form, the exact tie-aware optimum, brute force, the CLI."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence

import numpy as np
import pytest
from scipy import stats

from finesim.analysis.bound import (
    Bound,
    _gold,
    exact_bound,
    exact_limit,
    paper_bound,
    paper_limit,
    paper_sum_d2,
)
from finesim.cli.main import main


def brute_force_bound(gold: Sequence[float] | np.ndarray, *, max_n: int = 16) -> Bound:
    """Enumerate every 0/1 prediction and take the best scipy Spearman (for checking; exponential in
    ``n``)."""
    g = _gold(gold)
    n = g.size
    if n > max_n:
        raise ValueError(f"brute force over 2^{n} predictions is too slow; max_n={max_n}")
    best, best_m = -2.0, 0
    for bits in itertools.product((0.0, 1.0), repeat=n):
        b = np.asarray(bits)
        m = int(b.sum())
        if m in (0, n):
            continue
        rho = float(stats.spearmanr(b, g).statistic)
        if rho > best + 1e-12:
            best, best_m = rho, m
    return Bound(spearman=best, positives=best_m, n=n, method="brute force (scipy spearmanr)")


def brute_force_paper_sum_d2(n: int, k: int) -> float:
    """``sum d_i^2`` computed directly from ranks (mean ranks for the two predicted groups), distinct gold."""
    gold_rank = np.arange(1, n + 1, dtype=np.float64)  # rank 1 = most similar, as in the paper
    pred = np.where(gold_rank <= k, 1.0, 0.0)
    pred_rank = stats.rankdata(-pred)  # descending, ties averaged
    return float(np.sum((gold_rank - pred_rank) ** 2))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 11])
def test_paper_sum_d2_matches_ranks_for_every_split(n: int) -> None:
    for k in range(n + 1):
        assert paper_sum_d2(n, k) == pytest.approx(brute_force_paper_sum_d2(n, k))


@pytest.mark.parametrize("n", [4, 10, 100, 1000])
def test_paper_closed_form_for_even_n(n: int) -> None:
    b = paper_bound(n)
    assert b.positives == n // 2
    assert b.spearman == pytest.approx((7 * n * n - 4) / (8 * (n * n - 1)))


def test_paper_limit_is_0875() -> None:
    assert paper_limit() == 0.875
    assert paper_bound(100_000).spearman == pytest.approx(0.875, abs=1e-9)


def test_exact_bound_with_distinct_scores_tends_to_sqrt3_over_2() -> None:
    assert exact_limit() == pytest.approx(math.sqrt(3) / 2)
    assert exact_bound(np.arange(100_000)).spearman == pytest.approx(math.sqrt(3) / 2, abs=1e-6)
    # n = 4: the paper's shortcut says 0.9, the tie-correct Spearman of the best split is 2/sqrt(5)
    assert paper_bound(4).spearman == pytest.approx(0.9)
    assert exact_bound([1, 2, 3, 4]).spearman == pytest.approx(2 / math.sqrt(5))


@pytest.mark.parametrize("seed", range(8))
def test_exact_bound_matches_brute_force_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 11))
    gold = rng.integers(0, 4, size=n).astype(float)  # few levels: many ties
    if np.all(gold == gold[0]):
        gold[0] += 1
    exact, brute = exact_bound(gold), brute_force_bound(gold)
    assert exact.spearman == pytest.approx(brute.spearman, abs=1e-9)


def test_exact_bound_with_distinct_scores_matches_brute_force() -> None:
    gold = [0.3, 4.1, 2.2, 1.0, 3.3, 5.0, 0.0]
    assert exact_bound(gold).spearman == pytest.approx(brute_force_bound(gold).spearman)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="all gold scores are equal"):
        exact_bound([2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match="at least 2"):
        exact_bound([1.0])
    with pytest.raises(ValueError, match="NaN"):
        exact_bound([1.0, float("nan")])
    with pytest.raises(ValueError, match="too slow"):
        brute_force_bound(np.arange(30))
    with pytest.raises(ValueError, match="at least 2 pairs"):
        paper_bound(1)


def test_closed_forms_equal_the_search_over_every_split() -> None:
    """paper_bound and exact_bound_distinct take the optimum in closed form (a loop over k, and arrays of ranks, made
    --n 1e8 take minutes and gigabytes): the same value and split as the search over every k, for odd and even n."""
    from finesim.analysis.bound import exact_bound_distinct, paper_sum_d2

    for n in range(2, 80):
        searched_k = min(range(1, n), key=lambda k: (paper_sum_d2(n, k), k))
        assert paper_bound(n).positives == searched_k
        assert paper_bound(n).spearman == pytest.approx(1 - 6 * paper_sum_d2(n, searched_k) / (n * (n * n - 1)))
        exact = exact_bound(np.arange(n, dtype=np.float64))
        closed = exact_bound_distinct(n)
        assert closed.spearman == pytest.approx(exact.spearman, abs=1e-12) and closed.positives == exact.positives
    huge = exact_bound_distinct(10**8)
    assert huge.spearman == pytest.approx(math.sqrt(3) / 2, abs=1e-9) and huge.positives == 5 * 10**7


def test_cli_n(capsys) -> None:
    assert main(["bound", "--n", "1000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    row = out["rows"][0]
    assert row["paper"]["spearman"] == pytest.approx((7e6 - 4) / (8 * (1e6 - 1)))
    assert row["exact"]["spearman"] < row["paper"]["spearman"]
    assert out["limits"]["paper"] == 0.875


def test_cli_labels_file(tmp_path, capsys) -> None:
    path = tmp_path / "gold.txt"
    path.write_text("1\n2\n2\n3\n\n4\n", encoding="utf-8")
    assert main(["bound", "--labels", str(path)]) == 0
    text = capsys.readouterr().out
    assert f"{exact_bound([1, 2, 2, 3, 4]).spearman:.4f}" in text
    path.write_text("1\nabc\n", encoding="utf-8")
    assert main(["bound", "--labels", str(path)]) == 1
    assert "row 2" in capsys.readouterr().err


def test_cli_task(shared_data, capsys) -> None:
    assert main(["bound", "--task", "STSBenchmark", "--data", str(shared_data), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["source"] == "STSBenchmark" and row["exact"]["n"] == 1379
    assert 0.8 < row["exact"]["spearman"] < 0.9
