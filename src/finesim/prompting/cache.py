"""A resumable reply cache: one JSON object per line, keyed by backend, model, generation settings and prompt.

Every reply is appended as one complete line with a single ``write`` and flushed to disk (``fsync``) before
the next, under a lock, so concurrent requests never interleave and an interrupted run loses at most the line
being written. On reopening, a torn last line (or any line that is not a valid entry) is skipped, counted and
logged; the entries before it are reused, so the run resumes without repeating their requests.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger("finesim.prompting")


def cache_key(
    backend: str, model: str, settings: Mapping[str, Any], prompt: str, *, namespace: str | None = None
) -> str:
    """SHA-256 over backend, model, generation settings (they change replies) and prompt.

    The endpoint (``base_url``) is deliberately not part of the key, so a cache survives moving a server. Two
    different models served under one name would then share replies; a ``namespace`` (any label the user
    picks, e.g. the weights' revision) separates them. Without one the key is unchanged, so caches written
    before namespaces existed stay valid.
    """
    fields: dict[str, Any] = {"backend": backend, "model": model, "settings": dict(settings), "prompt": prompt}
    if namespace is not None:
        fields["namespace"] = namespace
    blob = json.dumps(fields, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ReplyCache:
    """Replies stored in a JSONL file (``path``), or only in memory when ``path`` is None."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self._replies: dict[str, str] = {}
        self._lock = threading.Lock()
        self.loaded = 0
        self.bad_lines = 0
        self.written = 0
        self._tail_checked = False
        if self.path is not None and self.path.exists():
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        with open(self.path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    key, reply = entry["key"], entry["reply"]
                    if not isinstance(key, str) or not isinstance(reply, str):
                        raise TypeError("key and reply must be strings")
                except (ValueError, KeyError, TypeError) as err:
                    self.bad_lines += 1
                    logger.warning("reply cache %s line %d is unreadable (%s); it is ignored", self.path, n, err)
                    continue
                self._replies[key] = reply
        self.loaded = len(self._replies)
        if self.loaded:
            logger.info("reply cache %s: %d replies reused", self.path, self.loaded)

    def __len__(self) -> int:
        return len(self._replies)

    def __contains__(self, key: str) -> bool:
        return key in self._replies

    def get(self, key: str) -> str | None:
        """The cached reply for ``key``, or None."""
        return self._replies.get(key)

    def put(self, key: str, reply: str, **meta: Any) -> None:
        """Store a reply (and append it to the file); ``meta`` (e.g. backend, model) is written alongside."""
        line = json.dumps({"key": key, "reply": reply, **meta}, ensure_ascii=False) + "\n"
        with self._lock:
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as fh:
                    if not self._tail_checked and fh.tell() > 0 and not self._ends_with_newline():
                        fh.write("\n")  # a torn line from an interrupted run must not swallow this entry
                    self._tail_checked = True
                    fh.write(line)
                    fh.flush()
                    os.fsync(fh.fileno())
            self._replies[key] = reply
            self.written += 1

    def _ends_with_newline(self) -> bool:
        assert self.path is not None
        with open(self.path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"

    def describe(self) -> dict[str, Any]:
        """Facts for a results file."""
        return {
            "path": None if self.path is None else str(self.path),
            "reused": self.loaded,
            "written": self.written,
            "unreadable_lines": self.bad_lines,
        }
