"""One error shape for every failure the server answers: ``{"error": "...", "error_type": "..."}``.

The shape and the ``error_type`` names follow text-embeddings-inference's error responses (``Validation``,
``Overloaded``, ``Unhealthy``, ``Backend``), with the kinds this server adds (``Unauthorized``,
``PayloadTooLarge``, ``RequestTimeout``, ``Unsupported``, ``NotFound``, ``MethodNotAllowed``, and ``NoIndex``:
``POST /search`` on a server started without ``--index``). FastAPI's own request-validation errors
and Starlette's HTTP errors are converted to it by :func:`install_error_handlers`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

VALIDATION = "Validation"
OVERLOADED = "Overloaded"
UNAUTHORIZED = "Unauthorized"
PAYLOAD_TOO_LARGE = "PayloadTooLarge"
REQUEST_TIMEOUT = "RequestTimeout"
UNHEALTHY = "Unhealthy"
UNSUPPORTED = "Unsupported"
BACKEND = "Backend"
NO_INDEX = "NoIndex"

_BY_STATUS = {
    400: UNSUPPORTED,
    401: UNAUTHORIZED,
    404: "NotFound",
    405: "MethodNotAllowed",
    408: REQUEST_TIMEOUT,
    413: PAYLOAD_TOO_LARGE,
    422: VALIDATION,
    429: OVERLOADED,
    503: UNHEALTHY,
}


class ApiError(Exception):
    """An error answered to the client: HTTP ``status``, ``error_type`` and a one-line message."""

    def __init__(self, status: int, message: str, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type or error_type_for(status)


def error_type_for(status: int) -> str:
    """The ``error_type`` of an HTTP status (``Backend`` for server errors, ``Http`` for other client errors)."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return BACKEND if status >= 500 else "Http"


def error_body(message: str, error_type: str) -> dict[str, str]:
    """The JSON body of an error response."""
    return {"error": message, "error_type": error_type}


def json_error(status: int, message: str, error_type: str | None = None, headers: Mapping[str, str] | None = None):
    """A ``JSONResponse`` in the error shape."""
    from starlette.responses import JSONResponse

    return JSONResponse(
        error_body(message, error_type or error_type_for(status)), status_code=status, headers=dict(headers or {})
    )


_TYPE_TAG = re.compile(r"^([a-z-]+\[.*\]|str|int|float|bool|none|list|dict|literal)$", re.IGNORECASE)


def _location(loc: Sequence[Any]) -> list[str]:
    """The path of a field without ``body`` and without pydantic's union-member tags (``str``, ``list[str]``)."""
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body":
        parts = parts[1:]
    return [p for p in parts if not _TYPE_TAG.match(p)]


def _spell(parts: list[str]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out or "body"


def _message(
    err: Mapping[str, Any], parts: list[str], fields: Sequence[str] | None, hints: Mapping[str, str] | None = None
) -> str:
    """pydantic's message of one error, with the right field names after an unknown one, what to do about a missing
    field that ``hints`` names, and without the ``Value error,`` prefix of a validator's own message."""
    from finesim.options import did_you_mean

    message = str(err.get("msg", "invalid value"))
    kind = err.get("type")
    if kind == "value_error" and message.startswith("Value error, "):
        return message[len("Value error, ") :]
    if kind == "missing" and hints and len(parts) == 1 and parts[0] in hints:
        return f"{message}: {hints[parts[0]]}"
    if kind == "extra_forbidden" and fields and len(parts) == 1:
        hint = did_you_mean(parts[0], fields).strip()
        return f"{message}: unknown field{' ' + hint if hint else ''}; the fields are {', '.join(fields)}"
    return message


def validation_message(
    errors: Sequence[Mapping[str, Any]],
    fields: Sequence[str] | None = None,
    hints: Mapping[str, str] | None = None,
) -> str:
    """One line from pydantic / FastAPI validation errors: ``field[i]: message; ...`` (input values not echoed).

    Of the alternatives of a union field (a string or a list of strings) only the one that got furthest is named:
    ``input[1]: Input should be a valid string`` rather than the error of each alternative. With ``fields`` (the
    body's fields), an unknown field is named with the closest right one: ``conditon: Extra inputs are not
    permitted: unknown field (did you mean 'condition'?); the fields are ...``. With ``hints`` (field -> what to
    do), a missing field says it: ``condition: Field required: send the condition ...``."""
    found: list[tuple[list[str], str]] = []
    lines = []
    for err in errors:
        if err.get("type") == "json_invalid":
            lines.append(f"the body is not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})")
            continue
        parts = _location(err.get("loc", ()))
        found.append((parts, _message(err, parts, fields, hints)))
    deepest: dict[str, int] = {}
    for parts, _ in found:
        key = parts[0] if parts else ""
        deepest[key] = max(deepest.get(key, 0), len(parts))
    for parts, message in found:
        if len(parts) == deepest[parts[0] if parts else ""]:
            lines.append(f"{_spell(parts)}: {message}")
    unique = list(dict.fromkeys(lines))
    shown = "; ".join(unique[:5])
    return shown + (f"; and {len(unique) - 5} more" if len(unique) > 5 else "")


BODY_PARSE_FAILED = "There was an error parsing the body"  # FastAPI's 400 detail when the body cannot be decoded


def unreadable_body(cause: BaseException | None) -> str:
    """The 422 message for a request body FastAPI could not decode (``cause``: the error it caught)."""
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not valid UTF-8 (byte {cause.start}): send JSON encoded as UTF-8"
    if isinstance(cause, RecursionError):
        return "the body's JSON is nested too deeply to read"
    return "the body could not be read as JSON" + (f" ({type(cause).__name__})" if cause is not None else "")


def install_error_handlers(
    app: Any,
    body_fields: Mapping[str, Sequence[str]] | None = None,
    missing_hints: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """Answer every error of ``app`` in the error shape: :class:`ApiError`, FastAPI's 422 validation errors,
    Starlette's HTTP errors (404, 405, ...) and unexpected exceptions (500, ``Backend``). ``body_fields``: the fields
    of each path's body, named when a request sends an unknown one; ``missing_hints``: by path, what to do about a
    required field left out."""
    known = dict(body_fields or {})
    hints = dict(missing_hints or {})
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    async def api_error(request: Any, exc: ApiError):
        return json_error(exc.status, exc.message, exc.error_type)

    async def request_validation(request: Any, exc: RequestValidationError):
        fields = known.get(request.url.path)
        message = validation_message(exc.errors(), fields, hints.get(request.url.path))
        kind = request.headers.get("content-type", "")
        whole_body = any(tuple(e.get("loc", ())) == ("body",) for e in exc.errors())  # no JSON object was read
        if whole_body and "json" not in kind.lower():  # e.g. curl -d without -H: a form body
            message += (
                f" (the request's Content-Type is {kind or 'missing'!r}: send the body as JSON, with "
                "'Content-Type: application/json', e.g. curl -H 'Content-Type: application/json' -d '{...}')"
            )
        return json_error(422, message, VALIDATION)

    async def http_error(request: Any, exc: HTTPException):
        if exc.status_code == 400 and exc.detail == BODY_PARSE_FAILED:  # FastAPI's answer to a body json cannot read
            return json_error(422, unreadable_body(exc.__cause__), VALIDATION)
        return json_error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    async def unexpected(request: Any, exc: Exception):
        return json_error(500, f"internal error: {type(exc).__name__}", BACKEND)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, request_validation)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
