"""Isotropy analysis of an embedding set (CASE Appendix C).

* :func:`approximate_isotropy`: I_iso ≈ min_i F(u_i) / max_i F(u_i) with F(u) = Σ_j exp(e_jᵀ u) over
  unit-normalised embeddings e_j and k random unit directions u_i (Durdy et al., 2023; the paper uses
  k = 1000). Computed in log space (log-sum-exp) so large inputs do not overflow. Note the floor: with unit
  rows every e_jᵀu lies in [-1, 1], so even a fully collapsed set scores at least exp(-2) ≈ 0.135 (and about
  exp(-2·max|vᵀu|), close to 1, in high dimensions); pass ``normalize=False`` to score raw vectors, where a
  collapsed set of long vectors tends to 0.
* :func:`cosine_to_mean`: the distribution of cos(x_i, μ) with μ the mean embedding; a distribution peaked
  near 1 means anisotropy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError(f"{int(np.sum(norms == 0))} embeddings are all-zero; cannot normalise them")
    return x / norms


def _check(embeddings: np.ndarray) -> np.ndarray:
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"expected a non-empty (n, d) matrix, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("embeddings contain NaN or infinite values")
    return x


def approximate_isotropy(
    embeddings: np.ndarray, *, num_directions: int = 1000, seed: int = 0, normalize: bool = True
) -> float:
    """The approximate isotropy I_iso in (0, 1]; 1 = isotropic."""
    x = _check(embeddings)
    if normalize:
        x = _unit_rows(x)
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((x.shape[1], num_directions))
    u /= np.linalg.norm(u, axis=0, keepdims=True)
    scores = x @ u  # (n, k)
    top = scores.max(axis=0)
    log_f = top + np.log(np.exp(scores - top).sum(axis=0))
    return float(np.exp(log_f.min() - log_f.max()))


def cosine_to_mean(embeddings: np.ndarray) -> np.ndarray:
    """cos(x_i, μ) for every embedding, with μ the mean embedding."""
    x = _check(embeddings)
    mu = x.mean(axis=0)
    if not np.any(mu):
        raise ValueError("the mean embedding is zero; cosine to the mean is undefined")
    return (_unit_rows(x) @ (mu / np.linalg.norm(mu))).astype(np.float64)


def isotropy_summary(embeddings: np.ndarray, *, num_directions: int = 1000, seed: int = 0) -> dict[str, Any]:
    """I_iso and the mean / std of the embedding-to-mean cosines (paper Tables 8-9)."""
    cos = cosine_to_mean(embeddings)
    return {
        "n": int(cos.shape[0]),
        "i_iso": approximate_isotropy(embeddings, num_directions=num_directions, seed=seed),
        "num_directions": num_directions,
        "cosine_to_mean_mean": float(cos.mean()),
        "cosine_to_mean_std": float(cos.std()),
    }


def save_histograms(distributions: dict[str, np.ndarray], path: str | Path, *, title: str = "", bins: int = 50) -> Path:
    """Save overlaid histograms of embedding-to-mean cosines (one per label) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    edges = np.linspace(-1.0, 1.0, bins + 1)
    for label, values in distributions.items():
        values = np.asarray(values)
        ax.hist(
            values,
            bins=edges.tolist(),  # the bin edges as floats (matplotlib types bins as a sequence)
            alpha=0.55,
            label=f"{label} (mean {values.mean():.3f}, std {values.std():.3f})",
        )
    ax.set_xlabel("cosine similarity to the mean embedding")
    ax.set_ylabel("embeddings")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(target, dpi=120)
    plt.close(fig)
    return target
