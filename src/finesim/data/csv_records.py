"""Reading CSV records with errors that name the file, row, line and column.

Python's ``csv`` module, in its default dialect, reads a field that opens a quote and never closes it as the rest
of the file (silently, or with a bare "field larger than field limit"); :func:`unclosed_quote` finds such a
quote first so the error can say where it opened. :func:`csv_records` reads a header and yields the records with
their 1-based record number and first line, skipping (and counting) blank lines.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from pathlib import Path

from finesim.data._io import header_index
from finesim.data.errors import DataFormatError, LoadReport


def _scan_quotes(text: str, delimiter: str) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """One pass over ``text`` by the default CSV dialect's quoting rules (see :func:`unclosed_quote`): where the first
    quoted field with text after its closing quote is, and where a quoted field opens that never closes, each as
    ``(line, field index)`` or None."""
    quoted = after_quote = False
    field_start, field, line = True, 0, 1
    opened: tuple[int, int] = (0, 0)
    text_after: tuple[int, int] | None = None
    previous = ""
    for ch in text:
        # lines end at \n, \r\n or a bare \r, as the reader counts them (``line_num``)
        new_line = ch == "\r" or (ch == "\n" and previous != "\r")
        previous = ch
        if quoted:
            if after_quote:
                after_quote = False
                if ch == '"':  # a doubled quote: literal, the field stays quoted
                    continue
                quoted = False  # the previous quote closed the field; ``ch`` is read outside quotes below
                if text_after is None and ch not in (delimiter, "\r", "\n"):
                    text_after = (line, field)
            else:
                after_quote = ch == '"'
                line += new_line
                continue
        if ch == '"' and field_start:
            quoted, field_start, opened = True, False, (line, field)
        elif ch == delimiter:
            field_start, field = True, field + 1
        elif ch in "\r\n":
            field_start, field = True, 0
            line += new_line
        else:
            field_start = False
    return (opened if quoted and not after_quote else None), text_after


def unclosed_quote(text: str, delimiter: str = ",") -> tuple[int, int] | None:
    """Where a quoted field opens that is never closed, as ``(line, field index)``; None if every quote closes.

    Follows the rules of Python's default (non-strict) CSV dialect: a ``"`` at the start of a field opens a quoted
    field, ``""`` inside it is a literal quote, and any other ``"`` inside it closes it. Python's reader does not
    complain about an unclosed quote: it silently reads the rest of the file into one field. ``delimiter`` separates
    fields (``"\\t"`` for TSV).
    """
    return _scan_quotes(text, delimiter)[0]


def text_after_quote(text: str, delimiter: str = ",") -> tuple[int, int] | None:
    """Where a quoted field's closing quote is followed by more text (``"A big" dog``), as ``(line, field index)``
    of the field; None if there is no such field. The reader in strict mode refuses such a field (the default
    dialect glues the text on and drops the quotes); this says where it is. Same rules as :func:`unclosed_quote`."""
    return _scan_quotes(text, delimiter)[1]


def physical_lines(text: str) -> list[str]:
    """``text``'s lines with their ends, split at ``\\n``, ``\\r\\n`` and a bare ``\\r`` only, as the csv reader counts
    them."""
    return io.StringIO(text, newline="").readlines()


TEXT_AFTER_QUOTE = (
    "text after a quoted field's closing quote (a field that starts with a quote is a quoted field): inside a "
    'quoted field write each quote twice ("" for "), or quote the whole field'
)


def text_after_quote_error(
    path: Path, text: str, record: tuple[int | None, int], header: Sequence[str], delimiter: str = ","
) -> DataFormatError:
    """The error for a record (``record``: its (row, first line), row None for the header; ``text``: its lines)
    whose quoted field has text after its closing quote, naming the line and column where :func:`text_after_quote`
    finds it."""
    row, line = record
    found = text_after_quote(text, delimiter)
    at_line, field = (line + found[0] - 1, found[1]) if found else (line, None)
    column = header[field] if field is not None and field < len(header) else None
    return DataFormatError(TEXT_AFTER_QUOTE, path=path, row=row, line=at_line, column=column)


def unclosed_quote_error(
    path: Path,
    opened: tuple[int, int],
    record: tuple[int, int] | None,
    header: list[str],
    *,
    header_line: int = 1,
    within: int | None = None,
) -> DataFormatError:
    """The error for a quoted field that never closes (``record``: the (row, line) being read, None: the header).

    ``header_line`` is the line the header starts on; ``within``, when given, says the quote was still open after
    that many characters (e.g. the csv module's field size limit) rather than at the end of the file.
    """
    quote_line, field = opened
    row, line = record if record is not None else (None, header_line)
    end = f"within {within} characters" if within is not None else "before the end of the file"
    return DataFormatError(
        f'a quoted field opened on line {quote_line} is never closed: no closing " {end} '
        "(a stray quote? double it inside a quoted field, or quote the whole field)",
        path=path,
        row=row,
        line=line,
        column=header[field] if record is not None and field < len(header) else None,
    )


def csv_records(
    path: Path, text: str, required: Sequence[str], *, report: LoadReport
) -> tuple[dict[str, int], Iterator[tuple[int, int, list[str]]]]:
    """Read the header of CSV ``text`` now and its records lazily.

    Returns:
        The position of each ``required`` column in the header, and an iterator of ``(row, line, fields)``:
        ``row`` the 1-based record number (blank lines not counted), ``line`` the file line it starts on.

    Raises:
        DataFormatError: an empty file, a missing or repeated column, a quote that never closes, malformed CSV,
            or a record with another number of fields than the header (while iterating, for the records).
    """
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    open_quote = unclosed_quote(text)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise DataFormatError("file is empty (expected a header row)", path=path) from None
    except csv.Error as err:  # e.g. a field over the csv module's size limit after a stray quote
        if open_quote is not None and open_quote[0] <= reader.line_num:
            raise unclosed_quote_error(path, open_quote, None, []) from None
        if "expected after" in str(err):  # strict: text after a closing quote
            lines = "".join(physical_lines(text)[: reader.line_num])
            raise text_after_quote_error(path, lines, (None, 1), []) from None
        raise DataFormatError(f"malformed CSV header: {err}", path=path, line=1) from None
    if open_quote is not None and reader.line_num >= open_quote[0]:
        raise unclosed_quote_error(path, open_quote, None, header)
    index = header_index(path, header, required)

    def records() -> Iterator[tuple[int, int, list[str]]]:
        row = 0
        while True:
            line = reader.line_num + 1
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                if open_quote is not None and line <= open_quote[0] <= reader.line_num:  # this record's quote runs on
                    raise unclosed_quote_error(path, open_quote, (row + 1, line), header) from None
                if "expected after" in str(err):  # strict: text after a closing quote
                    record_text = "".join(physical_lines(text)[line - 1 : reader.line_num])
                    raise text_after_quote_error(path, record_text, (row + 1, line), header) from None
                raise DataFormatError(f"malformed CSV: {err}", path=path, row=row + 1, line=line) from None
            if open_quote is not None and reader.line_num >= open_quote[0]:
                raise unclosed_quote_error(path, open_quote, (row + 1, line), header)
            if not fields or all(not f.strip() for f in fields):
                report.skip("blank lines")
                continue
            row += 1
            if len(fields) != len(header):
                raise DataFormatError(
                    f"has {len(fields)} fields, the header has {len(header)}", path=path, row=row, line=line
                )
            yield row, line, fields

    return index, records()
