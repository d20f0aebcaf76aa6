"""Low-level file reading with precise error locations."""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from pathlib import Path

from finesim.data.errors import DataFormatError


def read_text(path: str | Path, *, what: str = "data file") -> str:
    """Read a UTF-8 text file (a BOM is removed), raising :class:`DataFormatError` with the line of a bad byte."""
    p = Path(path)
    if not p.is_file():
        hint = " (it is a folder)" if p.is_dir() else ""
        raise DataFormatError(f"{what} not found{hint}", path=p)
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataFormatError(
            f"not valid UTF-8 (byte {raw[err.start]:#04x} at offset {err.start}); re-save the file as UTF-8",
            path=p,
            line=line,
        ) from None
    return text.removeprefix("\ufeff")


def split_lines(text: str) -> list[str]:
    """Split into lines, accepting \\n and \\r\\n, without a phantom last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def parse_label(
    value: str,
    *,
    path: str | Path,
    row: int,
    column: str,
    line: int | None = None,
) -> float:
    """Parse a finite float label or raise a located error."""
    text = value.strip()
    try:
        label = float(text)
    except ValueError:
        raise DataFormatError(
            f"label {value!r} is not a number", path=path, row=row, column=column, line=line
        ) from None
    if not math.isfinite(label):
        raise DataFormatError(f"label {value!r} is not finite", path=path, row=row, column=column, line=line)
    return label


def check_range(
    label: float,
    low: float,
    high: float,
    *,
    path: str | Path,
    row: int,
    column: str,
    line: int | None = None,
) -> None:
    """Raise if ``label`` lies outside the declared ``[low, high]``."""
    if not low <= label <= high:
        raise DataFormatError(
            f"label {label:g} is outside the declared range [{low:g}, {high:g}]",
            path=path,
            row=row,
            column=column,
            line=line,
        )


def require_text(value: str | None, *, path: str | Path, row: int, column: str, line: int | None = None) -> str:
    """Return ``value`` or raise if it is missing or blank."""
    if value is None or not value.strip():
        raise DataFormatError("text is empty", path=path, row=row, column=column, line=line)
    return value


def close_match(name: str, candidates: Sequence[str]) -> str | None:
    """The candidate closest to ``name`` (a likely typo), or None if none is close enough."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return close[0] if close else None


def header_index(path: str | Path, header: Sequence[str], required: Sequence[str]) -> dict[str, int]:
    """Map each ``required`` column to its position in a file's header (line 1).

    Raises:
        DataFormatError: a column name appears twice (which one would be meant is unknown), or a required column
            is missing; for a missing column, a close unused name in the header is offered as a rename hint.
    """
    seen: set[str] = set()
    for name in header:
        if name and name in seen:
            raise DataFormatError(
                f"column {name!r} appears more than once in the header {list(header)}; rename or remove the copy",
                path=path,
                line=1,
                column=name,
            )
        seen.add(name)
    for name in required:
        if name not in seen:
            close = close_match(name, [h for h in header if h not in required])
            hint = f" (found {close!r}: rename it)" if close else ""
            raise DataFormatError(
                f"missing column {name!r}{hint}; the header has {list(header)}, finesim expects {list(required)}",
                path=path,
                line=1,
                column=name,
            )
    return {name: list(header).index(name) for name in required}
