"""Prompting baselines for C-STS and STS-B (Deshpande et al., 2023, Sec. 4.2): prompts, demonstrations,
parsing, generation backends, a resumable reply cache and the evaluation loop."""

from __future__ import annotations

from finesim.prompting.backends import BackendError, GenerationBackend, HFBackend, OpenAICompatibleBackend
from finesim.prompting.cache import ReplyCache, cache_key
from finesim.prompting.parsing import ParsedReplies, parse_score, prompting_metrics, resolve_replies
from finesim.prompting.prompts import (
    EXAMPLE_FORMATS,
    INSTRUCTION_NAMES,
    LABEL_RANGES,
    TASKS,
    Example,
    build_prompt,
    format_example,
    instruction_text,
)
from finesim.prompting.runner import build_prompts, evaluate_prompting
from finesim.prompting.sampler import DemonstrationSampler

__all__ = [
    "EXAMPLE_FORMATS",
    "INSTRUCTION_NAMES",
    "LABEL_RANGES",
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
    "parse_score",
    "prompting_metrics",
    "resolve_replies",
]
