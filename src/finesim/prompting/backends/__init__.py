"""Generation backends: a local transformers model, or an OpenAI-compatible HTTP endpoint."""

from __future__ import annotations

from finesim.prompting.backends.base import BackendError, GenerationBackend, ReplyCallback
from finesim.prompting.backends.hf import HFBackend
from finesim.prompting.backends.openai_compat import OpenAICompatibleBackend

__all__ = ["BackendError", "GenerationBackend", "HFBackend", "OpenAICompatibleBackend", "ReplyCallback"]
