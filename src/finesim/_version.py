"""finesim's version, in a module of its own so any module can read it without importing the package's public API
(whose lazy imports reach every sub-package)."""

from __future__ import annotations

__version__ = "0.1.0"
