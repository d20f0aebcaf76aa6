"""The over-estimation count of the CCL paper's Appendix A (Eq. 16-17)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from datasets import Dataset

from finesim.analysis.overestimation import count_overestimation


def csts_rows() -> Dataset:
    # four sentence pairs, each under a high and a low condition; labels 1-5 -> (y - 1) / 4
    rows = {"sentence1": [], "sentence2": [], "condition": [], "label": [], "row": []}
    for k, (hi, lo) in enumerate([(4, 3), (5, 1), (3, 3), (4, 2)]):
        for cond, lab in ((f"c{k}-high", hi), (f"c{k}-low", lo)):
            rows["sentence1"].append(f"s1 {k}")
            rows["sentence2"].append(f"s2 {k}")
            rows["condition"].append(cond)
            rows["label"].append(float(lab))
            rows["row"].append(len(rows["row"]) + 2)  # 1-based file rows after a header
    return Dataset.from_dict(rows)


def test_counts_eq16_eq17_and_examples() -> None:
    ds = csts_rows()
    # scaled labels: pair0 (0.75, 0.5), pair1 (1.0, 0.0), pair2 (0.5, 0.5), pair3 (0.75, 0.25)
    preds = [
        0.99,
        0.29,  # pair0: pos +0.24 (not > 0.25), neg short 0.21 -> neither
        1.0,
        0.0,  # pair1: exact -> neither
        0.9,
        0.1,  # pair2: pos +0.4 > 0.25 and neg short 0.4 > 0 -> Eq. 16 and mirrored Eq. 17
        0.8,
        -0.1,  # pair3: pos +0.05 > 0, neg short 0.35 > 0.25 -> mirrored Eq. 17 only
    ]
    out = count_overestimation(ds, preds)
    assert (out["pairs"], out["eq16"], out["eq17"], out["overestimated"]) == (4, 1, 2, 2)
    assert out["rate"] == pytest.approx(0.5)
    first, second = out["examples"]
    assert (first["row_pos"], first["row_neg"], first["eq16"], first["eq17"]) == (6, 7, True, True)
    assert second["condition_pos"] == "c3-high" and second["label_neg"] == 0.25 and not second["eq16"]
    json.dumps(out)  # JSON-able
    # the printed Eq. 17 can never fire when l_pos >= l_neg
    assert count_overestimation(ds, preds, eq17="as_printed")["eq17"] == 0
    # a larger margin counts fewer pairs; max_examples limits the list, not the count
    assert count_overestimation(ds, preds, threshold=0.5)["overestimated"] == 0
    assert len(count_overestimation(ds, preds, max_examples=1)["examples"]) == 1


def test_prediction_range_and_errors() -> None:
    ds = csts_rows()
    preds = np.array([4.0, 3.0, 5.0, 1.0, 3.0, 3.0, 4.0, 2.0])  # a regressor on the raw 1-5 scale, exact
    assert count_overestimation(ds, preds, prediction_range=(1.0, 5.0))["overestimated"] == 0
    with pytest.raises(ValueError, match="must be finite"):
        count_overestimation(ds, preds, prediction_range=(0.0, float("inf")))
    with pytest.raises(ValueError, match="7 predictions for 8"):
        count_overestimation(ds, preds[:7])
    with pytest.raises(ValueError, match="not finite"):
        count_overestimation(ds, [0.5, float("nan")] * 4)
    with pytest.raises(ValueError, match="eq17"):
        count_overestimation(ds, preds, eq17="other")


def test_unpaired_rows_are_reported(shared_data) -> None:
    from finesim.data.csts import read_csts

    ds, _ = read_csts(shared_data / "csts" / "validation.csv")
    out = count_overestimation(ds, np.full(len(ds), 0.5))
    # rows whose partner condition is labelled -1 (skipped on load) cannot form a pair and are reported
    assert out["pairs"] * 2 + out["pairing"]["rows_in_bad_groups"] == len(ds)
    assert out["pairs"] > 800
