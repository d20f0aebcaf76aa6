"""Conditional search: index a corpus once, then ask "similar to X with respect to C" (``finesim index``).

- :class:`ConditionalIndex` (``conditional_index.py``): build, open, add, search (exact or approximate), info.
- ``store.py``: the folder layout, validation and atomic commits; ``encoders.py``: what each encoder type stores;
  ``tri.py``: the tri-encoder's query path per head kind; ``approximate.py``: faiss indexes and recall@k;
  ``corpus.py``: reading corpus files; ``distributed.py``: building and scoring tables on Ray Data;
  ``distributed_score.py``: ``finesim score --ray`` (the single-process scoring with its model calls on Ray actors).

See docs/search.md.
"""

from __future__ import annotations

from finesim.index.approximate import recall_at_k
from finesim.index.conditional_index import ConditionalIndex
from finesim.index.errors import IndexFormatError, ModelMismatchError

__all__ = ["ConditionalIndex", "IndexFormatError", "ModelMismatchError", "recall_at_k"]
