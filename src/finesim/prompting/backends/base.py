"""The interface every generation backend implements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

ReplyCallback = Callable[[int, str], None]


class BackendError(RuntimeError):
    """A backend could not produce a reply (after its retries); the message never contains credentials."""


@runtime_checkable
class GenerationBackend(Protocol):
    """Generates one reply per prompt.

    ``name`` and ``model`` and :meth:`settings` form the reply-cache key, so ``settings`` must hold every
    option that can change a reply (decoding, dtype, chat formatting) and nothing that cannot (batch size,
    timeouts).
    """

    name: str
    model: str

    def settings(self) -> dict[str, Any]:
        """Options that shape the replies."""
        ...

    def describe(self) -> dict[str, Any]:
        """Everything worth recording in a results file (never a credential)."""
        ...

    def generate(self, prompts: Sequence[str], on_reply: ReplyCallback | None = None) -> list[str | None]:
        """Replies in prompt order; ``on_reply(index, reply)`` is called as each one arrives.

        A reply is ``None`` only when the backend was told to record failures as invalid replies.
        """
        ...
