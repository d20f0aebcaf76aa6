"""Errors of the conditional index: each names the file (or the model) it is about."""

from __future__ import annotations

from pathlib import Path


class IndexFormatError(ValueError):
    """A missing, partial or corrupted index file; the message names the file and says what is wrong."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class ModelMismatchError(ValueError):
    """The model given for an index is not the model the index was built with (its weights hash differs)."""
