"""benchmarks/two_stage_pooled.py: the pooled reference and the pool's first stages, on small random data."""

from __future__ import annotations

import numpy as np
from claims_scripts import load_benchmark

from finesim.index import recall_at_k
from finesim.index.two_stage import fit_condition_map

pooled = load_benchmark("two_stage_pooled.py")


def unit(rng: np.random.Generator, n: int, d: int = 8) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_the_pooled_top_is_the_exact_top_when_the_pool_is_every_row_and_leaves_the_own_text_out() -> None:
    rng = np.random.default_rng(0)
    under, q = unit(rng, 300), unit(rng, 1)[0]
    rows = np.arange(300)
    own = int(np.argmax(under @ q))  # the query's own text would be first
    exact = [int(r) for r in np.argsort(-(under @ q)) if r != own][:10]
    assert pooled.pooled_top(rows, under, q, own) == exact
    assert own not in pooled.pooled_top(rows, under, q, own)
    assert pooled.pooled_top(rows, under, q, None)[0] == own


def test_recall_against_the_pooled_reference_never_understates_recall_against_the_exact_one() -> None:
    rng = np.random.default_rng(1)
    under = unit(rng, 500)
    for _ in range(50):
        q = unit(rng, 1)[0]
        exact = [int(r) for r in np.argsort(-(under @ q))[:10]]
        pool = np.sort(rng.choice(500, 120, replace=False))  # misses some of the exact top 10 (mostly)
        returned = rng.choice(pool, 10, replace=False)  # a search's top 10 from re-ranked (pooled) rows
        rows = np.union1d(pool, returned)
        reference = pooled.pooled_top(rows, under[rows], q, None)
        assert recall_at_k(reference, returned, 10) >= recall_at_k(exact, returned, 10)
        if set(exact) <= set(rows.tolist()):  # the pool holds the exact top 10: the two references agree
            assert reference == exact


def test_the_pool_takes_each_first_stages_top_rows_and_the_map_as_the_library_fits_it() -> None:
    rng = np.random.default_rng(2)
    first, under = unit(rng, 400), unit(rng, 400)
    sample = np.arange(0, 400, 4)
    weights, inverse = pooled.map_parts(first, under[sample], sample, 0.1)
    expected = fit_condition_map(first[sample], under[sample], 0.1)
    np.testing.assert_allclose(weights, expected, rtol=1e-6)
    np.testing.assert_allclose(inverse, 1 / np.linalg.norm(first @ expected, axis=1), rtol=1e-5)
    q = unit(rng, 2)
    per_query = pooled.pool_of(first, q, weights, inverse, 25)
    for vector, tops in zip(q, per_query):
        assert tops["conditioned"].tolist() == np.argsort(-(first @ vector), kind="stable")[:25].tolist()
        mapped = (first @ (weights @ vector)) * inverse
        assert tops["mapped"].tolist() == np.argsort(-mapped, kind="stable")[:25].tolist()
