"""Isotropy measures: I_iso near 1 for an isotropic sample, near its floor / 0 for a collapsed one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from finesim.case import approximate_isotropy, cosine_to_mean, isotropy_summary, save_histograms


def test_isotropic_gaussian_is_close_to_one():
    x = np.random.default_rng(0).standard_normal((20000, 16))
    assert approximate_isotropy(x) > 0.95


def test_collapsed_set_is_close_to_zero_without_normalisation():
    rng = np.random.default_rng(0)
    v = rng.standard_normal(16)
    x = 50.0 * (v / np.linalg.norm(v)) + 0.01 * rng.standard_normal((500, 16))
    assert approximate_isotropy(x, normalize=False) < 1e-6


def test_collapsed_unit_vectors_hit_the_exp_minus_two_floor():
    # with unit rows F(u) = n·exp(vᵀu) ranges over exp([-1, 1]) at best: the floor is exp(-2), not 0
    x = np.tile([[1.0, 0.0]], (100, 1))
    value = approximate_isotropy(x, num_directions=2000)
    assert value == pytest.approx(math.exp(-2), rel=0.01)
    assert approximate_isotropy(np.random.default_rng(1).standard_normal((5000, 2))) > 0.9


def test_removing_a_shared_component_raises_isotropy():
    # a shared offset (like the condition's own embedding) makes the set anisotropic; removing it restores it
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((3000, 32))
    shared = 3.0 * np.ones(32) / math.sqrt(32)
    with_offset, without = noise + shared, noise
    assert approximate_isotropy(without) > approximate_isotropy(with_offset) + 0.2
    assert cosine_to_mean(with_offset).mean() > cosine_to_mean(without).mean() + 0.3


def test_cosine_to_mean_and_summary():
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(cosine_to_mean(x), [1 / math.sqrt(2)] * 2)
    summary = isotropy_summary(x, num_directions=10)
    assert summary["n"] == 2 and summary["num_directions"] == 10
    assert summary["cosine_to_mean_std"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="mean embedding is zero"):
        cosine_to_mean(np.array([[1.0, 0.0], [-1.0, 0.0]]))
    with pytest.raises(ValueError, match="all-zero"):
        approximate_isotropy(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        approximate_isotropy(np.array([[np.nan, 1.0]]))


def test_histogram_png(tmp_path):
    rng = np.random.default_rng(0)
    path = save_histograms(
        {"cond": rng.uniform(0.5, 1, 100), "cond - c": rng.uniform(-0.2, 0.6, 100)}, tmp_path / "h.png"
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
