from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from finesim.evaluation.metrics import bootstrap_interval, pearson, spearman


def test_matches_scipy_times_100() -> None:
    rng = np.random.default_rng(0)
    pred, gold = rng.normal(size=50), rng.normal(size=50)
    assert spearman(pred, gold) == pytest.approx(100 * stats.spearmanr(pred, gold).statistic)
    assert pearson(pred, gold) == pytest.approx(100 * stats.pearsonr(pred, gold).statistic)


def test_hand_computed_spearman() -> None:
    # ranks of pred: 1,2,3,4; gold ranks: 1,3,2,4 -> d^2 = 0+1+1+0 = 2 -> 1 - 6*2/(4*15) = 0.8
    assert spearman([0.1, 0.2, 0.3, 0.4], [1, 3, 2, 5]) == pytest.approx(80.0)


def test_constant_predictions_are_zero_not_nan() -> None:
    assert spearman([0.5, 0.5, 0.5], [1, 2, 3]) == 0.0
    assert pearson([0.5, 0.5, 0.5], [1, 2, 3]) == 0.0
    assert spearman([1, 2, 3], [4, 4, 4]) == 0.0


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        spearman([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="NaN"):
        pearson([1, float("nan"), 3], [1, 2, 3])
    with pytest.raises(ValueError, match="at least 2"):
        spearman([1], [1])


def test_bootstrap_is_seeded_and_brackets_estimate() -> None:
    rng = np.random.default_rng(1)
    gold = rng.normal(size=200)
    pred = gold + rng.normal(scale=1.0, size=200)
    a = bootstrap_interval("spearman", pred, gold, resamples=200, seed=3)
    b = bootstrap_interval("spearman", pred, gold, resamples=200, seed=3)
    assert a == b
    assert a.low < spearman(pred, gold) < a.high
    assert 0 < a.high - a.low < 40
    with pytest.raises(ValueError, match="unknown metric"):
        bootstrap_interval("kendall", pred, gold)


def test_bootstrap_needs_enough_resamples() -> None:
    with pytest.raises(ValueError, match=r"0 \(no interval\) or at least 100 \(1000 is usual\), got 1"):
        bootstrap_interval("spearman", [1, 2, 3], [1, 3, 2], resamples=1)
    with pytest.raises(ValueError, match="at least 100, got 0"):
        bootstrap_interval("spearman", [1, 2, 3], [1, 3, 2], resamples=0)


def test_grouped_bootstrap_resamples_whole_groups() -> None:
    rng = np.random.default_rng(2)
    gold = rng.normal(size=60)
    pred = gold + rng.normal(scale=1.0, size=60)
    rows = bootstrap_interval("pearson", pred, gold, resamples=300, seed=5)
    # one group per row draws the same rows with the same seed: the same interval
    alone = bootstrap_interval("pearson", pred, gold, resamples=300, seed=5, groups=list(range(60)), unit="x")
    assert (alone.low, alone.high) == (rows.low, rows.high) and alone.unit == "x" and rows.unit == "row"
    # each pair shown twice (as C-STS shows a sentence pair under two conditions): resampling the 120 rows alone
    # treats the copies as independent and narrows the interval; resampling the pairs gives the 60 rows' width
    twice_p, twice_g = np.repeat(pred, 2), np.repeat(gold, 2)
    naive = bootstrap_interval("pearson", twice_p, twice_g, resamples=300, seed=5)
    paired = bootstrap_interval("pearson", twice_p, twice_g, resamples=300, seed=5, groups=np.repeat(np.arange(60), 2))
    assert paired.high - paired.low > 1.2 * (naive.high - naive.low)
    assert (paired.low, paired.high) == pytest.approx((rows.low, rows.high))  # the same draws of the 60 pairs
    with pytest.raises(ValueError, match=r"groups \(3\) and predictions \(4\)"):
        bootstrap_interval("pearson", [1, 2, 3, 4], [1, 2, 4, 3], resamples=100, groups=[1, 1, 2])
