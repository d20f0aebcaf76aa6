"""Prompting baselines for C-STS and STS-B (Deshpande et al., 2023, Sec. 4.2): prompts, demonstrations,
parsing, generation backends, a resumable reply cache and the evaluation loop.

The names below are imported from their modules on first use, so importing one light module of this package (e.g.
:mod:`finesim.prompting.prompts` for the command line's choices) does not import the others.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EXAMPLE_FORMATS",
    "INSTRUCTION_NAMES",
    "REGISTRY_TASKS",
    "TASKS",
    "BackendError",
    "DemonstrationSampler",
    "Example",
    "GenerationBackend",
    "HFBackend",
    "OpenAICompatibleBackend",
    "ParsedReplies",
    "ReplyCache",
    "build_prompt",
    "build_prompts",
    "cache_key",
    "evaluate_prompting",
    "format_example",
    "instruction_text",
    "label_range",
    "parse_score",
    "prompting_metrics",
    "resolve_replies",
]


def __getattr__(name: str) -> Any:
    """Import a prompting name from its module on first use (PEP 562)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from finesim.prompting import backends, cache, parsing, prompts, runner, sampler

    return next(getattr(m, name) for m in (backends, cache, parsing, prompts, runner, sampler) if hasattr(m, name))
