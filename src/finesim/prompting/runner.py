"""Run one prompting evaluation: build prompts, reuse cached replies, generate the rest, parse and score."""

from __future__ import annotations

import logging
import time
from typing import Any

from datasets import Dataset

from finesim.prompting.backends.base import GenerationBackend
from finesim.prompting.cache import ReplyCache, cache_key
from finesim.prompting.parsing import prompting_metrics, resolve_replies
from finesim.prompting.prompts import Example, ExampleFormat, build_prompt, instruction_text, label_range
from finesim.prompting.sampler import DemonstrationSampler

logger = logging.getLogger("finesim.prompting")


def build_prompts(
    queries: Dataset,
    train: Dataset,
    *,
    task: str,
    k: int,
    instructions: str,
    style: ExampleFormat = "plain",
    seed: int = 42,
) -> tuple[list[str], DemonstrationSampler]:
    """One prompt per query row, with ``k`` demonstrations drawn from ``train`` (seeded)."""
    sampler = DemonstrationSampler(train, task=task, k=k, seed=seed)
    instruction = instruction_text(task, instructions)
    cols = queries.to_dict()
    conditions = cols["condition"] if task == "csts" else [None] * len(queries)
    prompts = []
    for s1, s2, condition in zip(cols["sentence1"], cols["sentence2"], conditions):
        query = Example(s1, s2, condition)
        demonstrations = sampler.draw((s1, s2))
        prompts.append(build_prompt(query, demonstrations, instruction=instruction, style=style))
    if sampler.queries_with_own_pair:
        logger.warning(
            "%d of %d queries have their own sentence pair in the demonstration data; it was left out of their "
            "draws (%d %s excluded in all)",
            sampler.queries_with_own_pair,
            len(prompts),
            sampler.excluded_candidates,
            sampler.unit,
        )
    return prompts, sampler


def evaluate_prompting(
    queries: Dataset,
    train: Dataset,
    backend: GenerationBackend,
    *,
    task: str,
    k: int,
    instructions: str,
    style: ExampleFormat = "plain",
    seed: int = 42,
    cache: ReplyCache | None = None,
    cache_namespace: str | None = None,
    keep_rows: bool = True,
) -> dict[str, Any]:
    """Prompt ``backend`` for every query row and score the replies against the rows' labels.

    Replies already in ``cache`` (same backend, model, settings, prompt and ``cache_namespace``) are reused;
    new replies are added to it as they arrive, so an interrupted run resumes where it stopped. Identical
    prompts are sent once. ``cache_namespace`` keeps apart replies of different weights served under one model
    name (see :func:`finesim.prompting.cache.cache_key`).

    Returns:
        A dict with ``metrics`` (spearman, pearson, mse, invalid/out-of-range counts and percentages),
        ``requests`` (cached, sent, failed), ``demonstrations``, an ``example_prompt`` and, with
        ``keep_rows``, one record per query (row, label, reply, parsed score, prediction, flags).
    """
    low, high = label_range(task)  # also rejects an unknown task
    if len(queries) < 2:
        raise ValueError(f"need at least 2 query rows to correlate, got {len(queries)}")
    cache = cache if cache is not None else ReplyCache(None)
    prompts, sampler = build_prompts(queries, train, task=task, k=k, instructions=instructions, style=style, seed=seed)
    settings = backend.settings()
    keys = [cache_key(backend.name, backend.model, settings, p, namespace=cache_namespace) for p in prompts]
    todo = {key: prompt for key, prompt in zip(keys, prompts) if key not in cache}  # a repeated prompt once
    cached = sum(1 for key in keys if key in cache)
    todo_keys = list(todo)
    logger.info(
        "%d prompts: %d answered from the cache, %d distinct prompts to generate",
        len(prompts),
        cached,
        len(todo),
    )

    def store(i: int, reply: str) -> None:
        meta = {"backend": backend.name, "model": backend.model}
        if cache_namespace is not None:
            meta["namespace"] = cache_namespace
        cache.put(todo_keys[i], reply, **meta)

    start = time.perf_counter()
    backend.generate([todo[key] for key in todo_keys], on_reply=store)
    seconds = time.perf_counter() - start
    replies = [cache.get(key) for key in keys]
    failed = sum(1 for r in replies if r is None)
    parsed = resolve_replies(replies, (low, high), seed=seed)
    gold = [float(x) for x in queries["label"]]
    metrics = prompting_metrics(parsed, gold)
    metrics["failed_requests"] = failed
    result: dict[str, Any] = {
        "metrics": metrics,
        "label_range": [low, high],
        "requests": {
            "prompts": len(prompts),
            "from_cache": cached,
            "generated": sum(1 for key in todo_keys if key in cache),
            "failed": failed,
            "generation_seconds": round(seconds, 3),
            "cache_namespace": cache_namespace,
        },
        "demonstrations": sampler.describe(),
        "example_prompt": prompts[0],
    }
    if keep_rows:
        rows = queries["row"] if "row" in queries.column_names else list(range(1, len(queries) + 1))
        result["rows"] = [
            {
                "row": int(r),
                "label": g,
                "reply": reply,
                "parsed": p,
                "prediction": float(s),
                "invalid": bool(inv),
                "out_of_range": bool(oor),
            }
            for r, g, reply, p, s, inv, oor in zip(
                rows, gold, replies, parsed.parsed, parsed.scores, parsed.invalid, parsed.out_of_range
            )
        ]
    return result
