"""Errors of the conditional index: each names the file (or the model) it is about."""

from __future__ import annotations

from pathlib import Path

from finesim.evaluation.ray_scoring import ModelMismatchError

__all__ = ["IndexFormatError", "ModelMismatchError"]


class IndexFormatError(ValueError):
    """A missing, partial or corrupted index file; the message names the file and says what is wrong."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def relative_to(self, root: str | Path) -> IndexFormatError:
        """The same error with the file named relative to the index folder ``root`` (and ``root`` removed from the
        problem's text): what a server may tell its clients without showing its paths."""
        base = Path(root).resolve()
        try:
            name = str(Path(self.path).resolve().relative_to(base))
        except ValueError:
            name = Path(self.path).name
        problem = self.problem
        for prefix in {str(base), str(root)}:
            problem = problem.replace(prefix + "/", "").replace(prefix, "")
        return IndexFormatError(name, problem)
