"""The faiss layer (finesim.index.approximate): HNSW's efSearch widened with the number of results asked (a first
stage asking for hundreds of candidates), search-time parameters that change without rebuilding a stored index."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import import_or_skip
from finesim.index.approximate import AnnFile, ann_params, build_params, hnsw_ef_search, normalized


def test_ef_search_is_widened_with_the_results_asked():
    params = ann_params("hnsw")
    assert params["ef_search"] == 128 and params["ef_search_per_result"] == 4
    assert hnsw_ef_search(params, 10) == 128  # 4 x 10 = 40 < 128
    assert hnsw_ef_search(params, 32) == 128
    assert hnsw_ef_search(params, 33) == 132
    assert hnsw_ef_search(params, 200) == 800
    assert hnsw_ef_search(ann_params("hnsw", {"ef_search_per_result": 0}), 400) == 128  # fixed, as before


def test_build_params_leave_the_search_ones_out():
    assert build_params("hnsw", ann_params("hnsw")) == {"m": 32, "ef_construction": 64}
    assert build_params("ivf", ann_params("ivf", {"nlist": 8})) == {"nlist": 8}
    with pytest.raises(ValueError, match="unknown hnsw parameter 'ef'"):
        ann_params("hnsw", {"ef": 3})


def vectors(n: int = 4000, dim: int = 24, seed: int = 0) -> np.ndarray:
    return normalized(np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32))


def filled(folder, kind: str, params: dict, data: np.ndarray) -> AnnFile:
    ann = AnnFile(folder, "test", kind, params)
    ann.load()
    ann.update(len(data), data.shape[1], lambda a, b: iter([data[a:b]]), lambda m: data[:m])
    return ann


def coverage(ann: AnnFile, data: np.ndarray, queries: np.ndarray, n: int) -> float:
    """Mean share of the exact top ``n`` (brute force inner product) that the faiss search returns."""
    found = []
    for query in queries:
        exact = set(np.argsort(-(data @ query), kind="stable")[:n].tolist())
        found.append(len(exact & set(ann.search(query, n).tolist())) / n)
    return float(np.mean(found))


def test_a_wide_search_finds_the_exact_top_n_only_with_the_widened_ef(tmp_path):
    """Many results from a small ef: with efSearch fixed at 16 faiss returns well under the exact top 300; widened
    to 4 x 300 it returns nearly all of it (on 4,000 random vectors, a graph built with m = 8)."""
    import_or_skip("faiss")
    data, queries = vectors(), vectors(20, seed=1)
    small = {"m": 8, "ef_construction": 16, "ef_search": 16}
    widened = filled(tmp_path / "a", "hnsw", small, data)
    fixed = filled(tmp_path / "b", "hnsw", {**small, "ef_search_per_result": 0}, data)
    assert coverage(widened, data, queries, 300) >= 0.97
    assert coverage(fixed, data, queries, 300) < 0.8
    assert coverage(fixed, data, queries, 300) < coverage(widened, data, queries, 300)


def test_a_stored_index_is_reused_when_only_search_parameters_change(tmp_path):
    import_or_skip("faiss")
    data = vectors(300)
    filled(tmp_path, "hnsw", {"m": 8}, data)
    written = (tmp_path / "test.faiss").stat().st_mtime_ns
    again = AnnFile(tmp_path, "test", "hnsw", {"m": 8, "ef_search": 64, "ef_search_per_result": 2})
    assert again.load() and again.count == 300 and again.params["ef_search"] == 64
    # a file written before ef_search_per_result existed is reused too
    meta = json.loads((tmp_path / "test.json").read_text())
    del meta["params"]["ef_search_per_result"]
    (tmp_path / "test.json").write_text(json.dumps(meta))
    assert AnnFile(tmp_path, "test", "hnsw", {"m": 8}).load()
    # a build parameter that differs: not reused (the caller builds it again)
    assert not AnnFile(tmp_path, "test", "hnsw", {"m": 16}).load()
    assert not AnnFile(tmp_path, "test", "ivf", {}).load()
    assert (tmp_path / "test.faiss").stat().st_mtime_ns == written


def test_ivf_search_reads_nprobe_per_call(tmp_path):
    """IVF with every list probed is exact; with one list probed it finds less."""
    import_or_skip("faiss")
    data, queries = vectors(2000), vectors(10, seed=2)
    every = filled(tmp_path / "a", "ivf", {"nlist": 16, "nprobe": 16}, data)
    assert coverage(every, data, queries, 20) == 1.0
    one = AnnFile(tmp_path / "a", "test", "ivf", {"nlist": 16, "nprobe": 1})
    assert one.load()
    assert coverage(one, data, queries, 20) < 1.0
