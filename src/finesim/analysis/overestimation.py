"""Over-estimation count of the CCL paper (Liu et al. 2025, Appendix A, Eq. 16-17) for C-STS predictions.

A sentence pair is scored under its positive (higher-label) and its negative condition. With labels and
predictions on the [0, 1] scale and threshold ``t`` (0.25 in the paper, one C-STS label step):

- Eq. 16 (positive too high while the negative is too low): ``cos_pos - l_pos > t`` and ``l_neg - cos_neg >
  0``;
- Eq. 17 (negative too low while the positive is too high): ``l_neg - cos_neg > t`` and ``cos_pos - l_pos >
  0``.

A pair meeting either is over-estimated. **Reading of Eq. 17:** the paper prints its first condition as
``l_neg - cos(h_pos) > t``, which together with ``cos(h_pos) > l_pos >= l_neg`` can never hold; finesim uses
the mirror image of Eq. 16 above (``eq17="mirror"``, default) and offers the printed form as
``eq17="as_printed"``.

Labels are mapped to [0, 1] from their declared range (C-STS 1-5: ``(y - 1) / 4``). Predictions are mapped
linearly from ``prediction_range`` onto [0, 1]: ``(0, 1)`` (the default) uses them as they are, which is what the
paper does with the cosine of a bi-/tri-encoder; a cross-encoder trained on raw 1-5 labels needs ``(1, 5)``.
Predictions outside the range (a negative cosine, a regressor's overshoot) are mapped, not clipped or rejected;
``predictions_outside_range`` counts them, and a large count says the declared range is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from datasets import Dataset

from finesim.data.labels import minmax_scale
from finesim.data.pairing import pair_conditions

Eq17Reading = Literal["mirror", "as_printed"]


def count_overestimation(
    dataset: Dataset,
    predictions: Sequence[float] | np.ndarray,
    *,
    label_range: tuple[float, float] = (1.0, 5.0),
    prediction_range: tuple[float, float] = (0.0, 1.0),
    threshold: float = 0.25,
    eq17: Eq17Reading = "mirror",
    max_examples: int = 50,
) -> dict[str, Any]:
    """Count the over-estimated sentence pairs (Eq. 16-17) among C-STS validation predictions.

    Args:
        dataset: C-STS rows with ``sentence1, sentence2, condition, label`` (``row`` optional, as
            :func:`finesim.data.csts.read_csts` returns; ``-1`` labels must already be left out).
        predictions: one score per dataset row, in dataset order.
        label_range: the labels' declared range, mapped onto [0, 1].
        prediction_range: the range of the predictions that maps linearly onto [0, 1] (default ``(0, 1)``: as
            they are, for cosine scores).
        threshold: the over-estimation margin ``t`` (paper: 0.25).
        eq17: ``"mirror"`` (default) or ``"as_printed"`` (see the module docstring).
        max_examples: how many offending pairs to list (largest total deviation first); all are counted.

    Returns:
        A JSON-able dict: ``pairs`` (sentence pairs scored), ``eq16``, ``eq17``, ``overestimated`` (either),
        ``rate``, ``predictions_outside_range``, ``mean_positive_excess`` / ``mean_negative_shortfall`` (mean
        of ``cos_pos - l_pos`` and of ``l_neg - cos_neg`` over all pairs), ``examples`` and ``pairing`` (rows
        that did not form pairs) plus the settings used.

    Raises:
        ValueError: on a length mismatch, non-finite predictions, an empty ``prediction_range`` or an unknown
            ``eq17``.
    """
    if eq17 not in ("mirror", "as_printed"):
        raise ValueError(f"eq17 must be 'mirror' or 'as_printed', got {eq17!r}")
    preds = np.asarray(predictions, dtype=np.float64).reshape(-1)
    if preds.shape[0] != len(dataset):
        raise ValueError(f"{preds.shape[0]} predictions for {len(dataset)} dataset rows")
    if not np.isfinite(preds).all():
        bad = int(np.flatnonzero(~np.isfinite(preds))[0])
        raise ValueError(f"prediction {bad} is not finite ({preds[bad]})")
    low, high = (float(x) for x in prediction_range)
    if not (np.isfinite(low) and np.isfinite(high)):
        raise ValueError(f"prediction range [{low:g}, {high:g}] must be finite")
    if not high > low:
        raise ValueError(f"prediction range [{low:g}, {high:g}] is empty")
    outside = int(((preds < low) | (preds > high)).sum())
    preds = (preds - low) / (high - low)
    rows = dataset["row"] if "row" in dataset.column_names else list(range(1, len(dataset) + 1))
    position = {r: i for i, r in enumerate(rows)}
    if len(position) != len(rows):
        raise ValueError("the dataset's 'row' column has duplicates; cannot align predictions with pairs")
    pairs, report = pair_conditions(dataset, equal_labels="keep")
    if len(pairs) == 0:
        raise ValueError("no sentence pair has exactly two labelled conditions; nothing to count")
    idx_pos = np.array([position[r] for r in pairs["row_high"]])
    idx_neg = np.array([position[r] for r in pairs["row_low"]])
    l_pos = minmax_scale(pairs["label_high"], *label_range)
    l_neg = minmax_scale(pairs["label_low"], *label_range)
    c_pos, c_neg = preds[idx_pos], preds[idx_neg]
    excess_pos = c_pos - l_pos  # > 0: positive pair predicted too similar
    short_neg = l_neg - c_neg  # > 0: negative pair predicted too dissimilar
    eq16 = (excess_pos > threshold) & (short_neg > 0)
    if eq17 == "mirror":
        eq17_mask = (short_neg > threshold) & (excess_pos > 0)
    else:
        eq17_mask = ((l_neg - c_pos) > threshold) & (excess_pos > 0)
    either = eq16 | eq17_mask
    order = np.flatnonzero(either)
    order = order[np.argsort(-(excess_pos[order] + short_neg[order]), kind="stable")][:max_examples]
    examples = [
        {
            "sentence1": pairs["sentence1"][i],
            "sentence2": pairs["sentence2"][i],
            "condition_pos": pairs["condition_high"][i],
            "condition_neg": pairs["condition_low"][i],
            "row_pos": pairs["row_high"][i],
            "row_neg": pairs["row_low"][i],
            "label_pos": round(float(l_pos[i]), 4),
            "label_neg": round(float(l_neg[i]), 4),
            "prediction_pos": round(float(c_pos[i]), 4),
            "prediction_neg": round(float(c_neg[i]), 4),
            "eq16": bool(eq16[i]),
            "eq17": bool(eq17_mask[i]),
        }
        for i in order
    ]
    n = len(pairs)
    return {
        "definition": "CCL paper Appendix A, Eq. 16-17",
        "threshold": threshold,
        "eq17_reading": eq17,
        "label_range": list(label_range),
        "prediction_range": [low, high],
        "predictions_outside_range": outside,
        "pairs": n,
        "eq16": int(eq16.sum()),
        "eq17": int(eq17_mask.sum()),
        "overestimated": int(either.sum()),
        "rate": float(either.sum() / n),
        "mean_positive_excess": float(excess_pos.mean()),
        "mean_negative_shortfall": float(short_neg.mean()),
        "examples": examples,
        "pairing": report.as_dict(),
    }
