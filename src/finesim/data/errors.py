"""Errors and load reports shared by every loader."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

logger = logging.getLogger("finesim.data")


class DataFormatError(ValueError):
    """Bad input: names the file and, where known, the row and the column.

    ``row`` is the 1-based data record (header excluded); ``line`` the 1-based physical line where that record
    starts (they differ when a file has a header or quoted newlines).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path,
        row: int | None = None,
        column: str | None = None,
        line: int | None = None,
    ) -> None:
        self.path = str(path)
        self.row = row
        self.column = column
        self.line = line
        self.reason = message
        where = [self.path]
        if row is not None:
            where.append(f"row {row}" + (f" (line {line})" if line is not None and line != row else ""))
        elif line is not None:
            where.append(f"line {line}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"{', '.join(where)}: {message}")


def skipped_text(skipped: dict[str, int]) -> str:
    """Rows skipped by reason, for people: ``{"unlabeled (-1) rows": 3}`` as ``3 unlabeled (-1) rows``."""
    return ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))


@dataclass
class LoadReport:
    """What a loader read, kept and skipped (nothing is dropped without being counted here)."""

    path: str
    rows_read: int = 0
    rows_kept: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, n: int = 1) -> None:
        """Count ``n`` rows skipped for ``reason``."""
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped.values())

    def log(self) -> None:
        """Log the report at INFO (callers also carry ``as_dict()`` into their results files)."""
        if self.skipped:
            detail = skipped_text(self.skipped)
            logger.info("%s: kept %d of %d rows; skipped %s", self.path, self.rows_kept, self.rows_read, detail)
        else:
            logger.debug("%s: kept all %d rows", self.path, self.rows_kept)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)
