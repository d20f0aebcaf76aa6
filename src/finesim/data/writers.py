"""Writing tables (CSV, TSV, JSONL, Parquet) row batch by row batch, atomically.

:class:`TableWriter` writes into a temporary file in the target's folder and renames it over the target only when
:meth:`TableWriter.commit` is called (a ``with`` block commits when it ends without an exception): a failure or
Ctrl-C never leaves a half-written table where the output should be, and an earlier file there stays intact until
the new one is complete. Memory stays flat: each batch of rows is written as it comes.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from finesim.data.errors import DataFormatError
from finesim.data.table import EXTENSIONS
from finesim.results import atomic_commit, atomic_temp_file

WRITE_FORMATS = ("csv", "tsv", "jsonl", "parquet")


def output_format(path: str | Path, explicit: str | None = None) -> str:
    """The format to write ``path`` in: ``explicit``, else by extension (the readers' table,
    :data:`finesim.data.table.EXTENSIONS`)."""
    if explicit is not None:
        if explicit not in WRITE_FORMATS:
            raise ValueError(f"output format {explicit!r} is not one of {list(WRITE_FORMATS)}")
        return explicit
    fmt = EXTENSIONS.get(Path(path).suffix.lower())
    if fmt is None:
        raise ValueError(
            f"cannot tell the output format of {str(path)!r} from its extension; use .csv, .tsv, .jsonl or .parquet "
            f"(or name it: one of {list(WRITE_FORMATS)})"
        )
    return fmt


class TableWriter:
    """Write rows (dicts with the same keys, in column order) to ``path`` in ``format``; see the module docstring.

    Args:
        path: the target file.
        columns: the column names, in order (every row must have them).
        format: one of :data:`WRITE_FORMATS`; None: by the extension of ``path``.
    """

    def __init__(self, path: str | Path, columns: Sequence[str], format: str | None = None) -> None:
        self.path = Path(path)
        self.format = output_format(self.path, format)
        self.columns = list(columns)
        self.rows_written = 0
        self._tmp = atomic_temp_file(self.path)
        self._handle: Any = None
        self._csv: Any = None
        self._parquet: Any = None
        self._schema: Any = None
        if self.format in ("csv", "tsv"):
            self._handle = open(self._tmp, "w", encoding="utf-8", newline="")
            self._csv = csv.writer(self._handle, delimiter="," if self.format == "csv" else "\t")
            self._csv.writerow(self.columns)
        elif self.format == "jsonl":
            self._handle = open(self._tmp, "w", encoding="utf-8")

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        """Append rows (each a dict with every column)."""
        if not rows:
            return
        if self.format in ("csv", "tsv"):
            self._csv.writerows([[_cell(row.get(c)) for c in self.columns] for row in rows])
        elif self.format == "jsonl":
            for row in rows:
                self._handle.write(json.dumps({c: row.get(c) for c in self.columns}, ensure_ascii=False) + "\n")
        else:
            self._write_parquet(rows)
        self.rows_written += len(rows)

    def _write_parquet(self, rows: Sequence[dict[str, Any]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        data = {c: [row.get(c) for row in rows] for c in self.columns}
        if self._parquet is None:
            table = pa.Table.from_pydict(data)
            self._schema = table.schema
            self._parquet = pq.ParquetWriter(str(self._tmp), self._schema)
        else:
            try:
                table = pa.Table.from_pydict(data, schema=self._schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
                raise DataFormatError(
                    f"rows {self.rows_written + 1}..{self.rows_written + len(rows)} do not fit the column types of "
                    f"the first rows ({err}); write .jsonl or .csv instead",
                    path=self.path,
                ) from None
        self._parquet.write_table(table)

    def commit(self) -> Path:
        """Finish the file and move it into place; returns the path."""
        if self.format == "parquet" and self._parquet is None:  # no rows: an empty table with the columns
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({c: pa.array([], type=pa.string()) for c in self.columns}), str(self._tmp))
        self._close()
        return atomic_commit(self._tmp, self.path)

    def abort(self) -> None:
        """Drop the temporary file; the target is left as it was."""
        self._close()
        self._tmp.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._parquet is not None:
            self._parquet.close()
            self._parquet = None

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def _cell(value: Any) -> Any:
    """A CSV cell: strings and numbers as they are, None empty, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, ensure_ascii=False)
