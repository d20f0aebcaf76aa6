"""Conditional search: index a corpus once, then ask "similar to X with respect to C" (``finesim index``).

- :class:`ConditionalIndex` (``conditional_index.py``): build, open, add, search (exact, two-stage or approximate).
- ``store.py``: the folder layout, validation and atomic commits; ``encoders.py``: what each encoder type stores;
  ``two_stage.py``: the condition-independent first stage and the re-ranking of its candidates;
  ``rerank_depth.py``, ``feedback.py``: how deep, and which candidates, a two-stage search re-ranks;
  ``tri.py``: the tri-encoder's query path per head kind; ``approximate.py``: faiss indexes and recall@k;
  ``corpus.py``: reading corpus files; ``distributed.py``: building an index on Ray Data (scoring on Ray is
  :mod:`finesim.evaluation.ray_scoring`).

The names below are imported on first use, so ``finesim.index.store`` (``finesim index info``) loads without torch.
See docs/search.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConditionalIndex", "IndexFormatError", "ModelMismatchError", "recall_at_k"]


def __getattr__(name: str) -> Any:
    """Import the public names on first use (PEP 562)."""
    if name == "ConditionalIndex":
        from finesim.index.conditional_index import ConditionalIndex

        return ConditionalIndex
    if name == "recall_at_k":
        from finesim.index.approximate import recall_at_k

        return recall_at_k
    if name in ("IndexFormatError", "ModelMismatchError"):
        from finesim.index import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'finesim.index' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *(n for n in globals() if n.startswith("__"))})
