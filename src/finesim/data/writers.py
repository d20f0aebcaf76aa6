"""Writing tables (CSV, TSV, JSONL, Parquet) row batch by row batch, atomically.

:class:`TableWriter` writes into a temporary file in the target's folder and renames it over the target only when
:meth:`TableWriter.commit` is called (a ``with`` block commits when it ends without an exception): a failure or
Ctrl-C never leaves a half-written table where the output should be, and an earlier file there stays intact until
the new one is complete. Memory stays flat: each batch of rows is written as it comes.

Text read from a CSV or TSV file has no types. Given such columns (``infer_types``), a Parquet output gets the types
pandas and pyarrow would read them with (:func:`cell_kinds`): a column whose every non-empty cell is an integer is
``int64``, a number ``float64``, ``true``/``false`` ``bool`` (empty cells are nulls); any other column stays a string.
The kinds are known only when every row has been seen, so the rows are written as text and the file is rewritten
with those types, batch by batch, when it is committed. An integer with a leading zero (``007``, an identifier) or
beyond 64 bits keeps its column a string rather than lose digits.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from finesim.data.errors import DataFormatError
from finesim.data.table import EXTENSIONS
from finesim.results import atomic_commit, atomic_temp_file

WRITE_FORMATS = ("csv", "tsv", "jsonl", "parquet")
KINDS = ("int", "float", "bool")
"""The types a text column of a CSV or TSV input can get in a Parquet output, narrowest first."""

_DIGITS = re.compile(r"-?[0-9]+")
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,18})")
_FLOAT = re.compile(
    r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:nan|inf|infinity)", re.I
)
_BOOL = frozenset({"true", "false", "True", "False", "TRUE", "FALSE"})
_INT64_MAX = 2**63 - 1
_NUMBER = frozenset(("int", "float"))
_REAL = frozenset(("float",))
_TRUTH = frozenset(("bool",))


def cell_kinds(text: str) -> frozenset[str]:
    """The types of :data:`KINDS` the text cell ``text`` (not empty) parses as: ``{"int", "float"}`` for ``12``,
    ``{"float"}`` for ``1.5`` or ``1e-3``, ``{"bool"}`` for ``true``; none for any other text, a number with a
    leading zero (``007``) or spaces, or an integer beyond 64 bits."""
    if _DIGITS.fullmatch(text):
        if _INT.fullmatch(text) and abs(int(text)) <= _INT64_MAX:
            return _NUMBER
        return frozenset()  # a leading zero (an identifier) or more than 64 bits: kept as text
    if _FLOAT.fullmatch(text):
        return _REAL
    if text in _BOOL:
        return _TRUTH
    return frozenset()


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
        infer_types: columns of text read from a CSV or TSV file: in a Parquet output, such a column whose every
            non-empty cell parses as one type (:func:`cell_kinds`) gets that type (see the module docstring).
            Ignored for the other formats, which write the text as it is.
    """

    def __init__(
        self, path: str | Path, columns: Sequence[str], format: str | None = None, *, infer_types: Sequence[str] = ()
    ) -> None:
        self.path = Path(path)
        self.format = output_format(self.path, format)
        self.columns = list(columns)
        self.rows_written = 0
        # the kinds each text column can still take, and the columns with a non-empty cell seen
        self._kinds: dict[str, frozenset[str]] = (
            {c: frozenset(KINDS) for c in infer_types if c in self.columns} if self.format == "parquet" else {}
        )
        self._valued: set[str] = set()
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
            self._note_kinds(rows)
            self._write_parquet(rows)
        self.rows_written += len(rows)

    def _note_kinds(self, rows: Sequence[dict[str, Any]]) -> None:
        for column, kinds in list(self._kinds.items()):
            for row in rows:
                value = row.get(column)
                if value is None or value == "":
                    continue
                kinds = kinds & cell_kinds(value) if isinstance(value, str) else frozenset()
                self._valued.add(column)
                if not kinds:
                    break
            if kinds:
                self._kinds[column] = kinds
            else:
                del self._kinds[column]  # text (or not text at all): written as it is

    def inferred_types(self) -> dict[str, str]:
        """The columns that a Parquet output writes as ``int64``, ``float64`` or ``bool`` rather than text, so far."""
        names = {"int": "int64", "float": "float64", "bool": "bool"}
        return {c: names[next(k for k in KINDS if k in kinds)] for c, kinds in self._kinds.items() if c in self._valued}

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
        types = self.inferred_types()
        if types:
            self._retype(types)
        return atomic_commit(self._tmp, self.path)

    def _retype(self, types: dict[str, str]) -> None:
        """Rewrite the temporary Parquet file with ``types`` (column -> type) for its text columns, row group by row
        group (memory stays flat); empty cells become nulls."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        typed = atomic_temp_file(self.path)
        try:
            with pq.ParquetFile(str(self._tmp)) as source:
                fields = [pa.field(f.name, types[f.name]) if f.name in types else f for f in source.schema_arrow]
                schema = pa.schema(fields)
                with pq.ParquetWriter(str(typed), schema) as out:
                    for group in range(source.num_row_groups):
                        table = source.read_row_group(group)
                        for name, type_ in types.items():
                            i = table.schema.get_field_index(name)
                            text = table.column(i)
                            cells = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
                            table = table.set_column(i, pa.field(name, type_), pc.cast(cells, type_))
                        out.write_table(table)
        except BaseException:
            typed.unlink(missing_ok=True)
            raise
        self._tmp.unlink(missing_ok=True)
        self._tmp = typed

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
