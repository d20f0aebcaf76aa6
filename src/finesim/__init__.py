"""finesim: fine-grained and conditional semantic textual similarity.

Sub-packages:

- :mod:`finesim.data` -- loaders for C-STS, STS12-16, STS-B, SICK and SNLI as ``datasets.Dataset``.
- :mod:`finesim.evaluation` -- task registry, metrics and the evaluation harness.
- :mod:`finesim.models` -- model resolution (Hub id, local folder, plain transformers checkpoint).
- :mod:`finesim.cli` -- the ``finesim`` command.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
