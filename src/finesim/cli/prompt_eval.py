"""``finesim prompt-eval``: the C-STS / STS-B prompting baseline with a local or an HTTP-served model.

Examples::

    finesim prompt-eval --backend hf --model google/flan-t5-large --task csts --k-shot 2 --instructions short
    OPENAI_API_KEY=... finesim prompt-eval --backend openai --model gpt-4o-mini --task stsb --k-shot 4 \\
        --instructions long --output results/gpt4o-mini-stsb-k4-long.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

from finesim.cli.common import (
    UsageError,
    check_output_file,
    command_parser,
    non_negative_int,
    positive_float,
    positive_int,
)

logger = logging.getLogger("finesim.prompting")

# each backend's own options: (dest, flag, default), filled as the parser is built
BACKEND_OPTIONS: dict[str, list[tuple[str, str, Any]]] = {}


def register(subparsers: Any) -> None:
    """Add the ``prompt-eval`` sub-command."""
    from finesim.prompting.prompts import EXAMPLE_FORMATS, INSTRUCTION_NAMES, TASKS

    p = command_parser(
        subparsers,
        "prompt-eval",
        help="score sentence pairs by prompting a generative model (C-STS paper, Sec. 4.2)",
        description="Prompt a generative model for similarity scores on C-STS or STS-B and report Spearman, "
        "Pearson, invalid % and out-of-range %. Replies are cached so an interrupted run resumes.",
    )
    p.add_argument("--backend", choices=("hf", "openai"), required=True, help="local transformers or HTTP API")
    p.add_argument("--model", required=True, help="checkpoint folder / Hub id (hf) or served model name (openai)")
    p.add_argument("--task", choices=TASKS, default="csts", help="the task prompted for")
    p.add_argument("--k-shot", type=non_negative_int, default=0, help="in-context examples (paper: 0, 2, 4)")
    p.add_argument("--instructions", choices=INSTRUCTION_NAMES, default="short", help="the instruction text")
    p.add_argument("--example-format", choices=EXAMPLE_FORMATS, default="plain", help="see docs/prompting.md")
    p.add_argument("--seed", type=int, default=42, help="demonstration sampling and invalid-reply draws")
    p.add_argument("--data", help="data root (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument("--split", choices=("validation", "test"), default="validation", help="STS-B only: dev or test")
    p.add_argument("--eval-file", help="evaluate this file instead (C-STS CSV or STS-B TSV, by --task)")
    p.add_argument("--train-file", help="draw demonstrations from this file instead")
    p.add_argument("--limit", type=positive_int, help="only the first N evaluation rows")
    p.add_argument("--output", metavar="FILE", help="results JSON (written atomically)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument("--cache", help="reply cache JSONL (default: next to --output, <output>.replies.jsonl)")
    p.add_argument("--no-cache", action="store_true", help="keep replies in memory only")
    p.add_argument(
        "--cache-namespace",
        help="label added to every cache key, e.g. the weights' revision: keeps apart the replies of different "
        "weights served under one --model name (the key omits --base-url)",
    )
    p.add_argument("--no-rows", action="store_true", help="leave per-row replies out of the results file")
    p.add_argument("--max-new-tokens", type=positive_int, default=20, help="reply length limit (paper: 20)")
    hf = p.add_argument_group("hf backend")
    hf.add_argument(
        "--model-kind", choices=("auto", "causal", "seq2seq"), default="auto", help="decoder-only or encoder-decoder"
    )
    hf.add_argument("--dtype", choices=("auto", "fp32", "bf16", "fp16"), default="auto", help="weights' dtype")
    hf.add_argument("--device", default="auto", help="torch device")
    hf.add_argument("--device-map", help="e.g. 'auto' to spread a large model over devices (needs accelerate)")
    hf.add_argument("--batch-size", type=positive_int, default=8, help="prompts per generation batch")
    hf.add_argument(
        "--special-tokens",
        choices=("auto", "yes", "no"),
        default="auto",
        help="add the tokenizer's special tokens (auto: for encoder-decoder models only)",
    )
    hf.add_argument("--chat-template", action="store_true", help="wrap prompts with the tokenizer's chat template")
    hf.add_argument("--trust-remote-code", action="store_true", help="let the checkpoint run its own model code")
    api = p.add_argument_group("openai backend")
    api.add_argument(
        "--base-url",
        default=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
        help="API root incl. /v1 (default: $OPENAI_BASE_URL or OpenAI); vLLM: http://localhost:8000/v1",
    )
    api.add_argument("--api", choices=("chat", "completions"), default="chat", help="which endpoint to call")
    api.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    api.add_argument("--timeout", type=positive_float, default=60.0, help="seconds per request")
    api.add_argument("--max-retries", type=non_negative_int, default=5, help="retries per request")
    api.add_argument("--concurrency", type=positive_int, default=4, help="requests in flight at a time")
    api.add_argument(
        "--on-error",
        choices=("fail", "invalid"),
        default="fail",
        help="a request that fails after its retries stops the run (fail) or is scored as an invalid reply",
    )
    api.add_argument("--system-prompt", help="optional system message (chat api)")
    for backend, group in (("hf", hf), ("openai", api)):
        BACKEND_OPTIONS[backend] = [(a.dest, a.option_strings[0], a.default) for a in group._group_actions]
    p.set_defaults(func=run)


def check_backend_options(args: argparse.Namespace) -> None:
    """Refuse the other backend's options (``--dtype`` with ``--backend openai``, ``--concurrency`` with ``hf``):
    they would be ignored without a word."""
    other = "openai" if args.backend == "hf" else "hf"
    given = [flag for dest, flag, default in BACKEND_OPTIONS.get(other, []) if getattr(args, dest, default) != default]
    if given:
        raise UsageError(
            f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --backend {other}, not "
            f"--backend {args.backend}: drop {'it' if len(given) == 1 else 'them'} (see finesim prompt-eval --help)"
        )


def _load(task: str, path: Path) -> tuple[Any, dict[str, Any]]:
    from finesim.data import read_csts, read_stsb

    dataset, report = read_csts(path) if task == "csts" else read_stsb(path)
    return dataset, report.as_dict()


def _resolve_files(args: argparse.Namespace) -> tuple[Path, Path]:
    """The evaluated file and the demonstrations file: ``--eval-file`` / ``--train-file``, else the task's files in
    the evaluation task registry (``tasks.yaml``), relative to the data root."""
    from finesim.paths import data_root
    from finesim.prompting.prompts import REGISTRY_TASKS, registry_task

    if args.split not in REGISTRY_TASKS[args.task] and not args.eval_file:
        raise ValueError(f"no default {args.split} file for task {args.task!r} (labels not public); pass --eval-file")
    task = registry_task(args.task, args.split if args.split in REGISTRY_TASKS[args.task] else "validation")
    if args.eval_file and args.train_file:
        return Path(args.eval_file), Path(args.train_file)
    root = data_root(args.data)
    eval_file = Path(args.eval_file) if args.eval_file else root / task.path
    train_file = Path(args.train_file) if args.train_file else root / str(task.demonstrations)
    return eval_file, train_file


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:  # a missing file: the loader reports it
        return a.resolve() == b.resolve()


def _backend(args: argparse.Namespace) -> Any:
    from finesim.prompting.backends import HFBackend, OpenAICompatibleBackend

    if args.backend == "hf":
        special = {"auto": None, "yes": True, "no": False}[args.special_tokens]
        return HFBackend(
            args.model,
            kind=args.model_kind,
            dtype=args.dtype,
            device=args.device,
            device_map=args.device_map,
            batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens,
            add_special_tokens=special,
            chat_template=args.chat_template,
            trust_remote_code=args.trust_remote_code,
            show_progress=not args.no_progress,
        )
    return OpenAICompatibleBackend(
        args.model,
        base_url=args.base_url,
        api=args.api,
        api_key_env=args.api_key_env,
        max_tokens=args.max_new_tokens,
        timeout=args.timeout,
        max_retries=args.max_retries,
        concurrency=args.concurrency,
        on_error=args.on_error,
        system_prompt=args.system_prompt,
        show_progress=not args.no_progress,
    )


def run(args: argparse.Namespace) -> int:
    """Execute ``finesim prompt-eval``; returns the exit code."""
    from finesim.prompting.cache import ReplyCache
    from finesim.prompting.runner import evaluate_prompting
    from finesim.results import environment_record, file_sha256, write_json_atomic

    check_backend_options(args)
    check_output_file(args.output)
    if args.backend == "hf":  # a missing folder or an unreachable Hub id fails now, before the data is read
        from finesim.models.hub import resolve_model_path

        resolve_model_path(args.model)
    eval_file, train_file = _resolve_files(args)
    same_file = _same_file(eval_file, train_file)
    if same_file:
        logger.warning(
            "the demonstrations come from the evaluated file %s itself; each query's own sentence pair is left "
            "out of its demonstrations, but the other evaluated rows are not (use a separate training file)",
            eval_file,
        )
    queries, eval_report = _load(args.task, eval_file)
    train, train_report = _load(args.task, train_file)
    if args.limit is not None:
        queries = queries.select(range(min(args.limit, len(queries))))
    if args.no_cache:
        cache_path = None
    elif args.cache:
        cache_path = Path(args.cache)
    elif args.output:
        out = Path(args.output)
        cache_path = out.with_name(out.stem + ".replies.jsonl")
    else:
        cache_path = None
        logger.warning("no --output and no --cache: replies are not saved, an interrupted run starts over")
    cache = ReplyCache(cache_path)
    backend = _backend(args)
    result = evaluate_prompting(
        queries,
        train,
        backend,
        task=args.task,
        k=args.k_shot,
        instructions=args.instructions,
        style=args.example_format,
        seed=args.seed,
        cache=cache,
        cache_namespace=args.cache_namespace,
        keep_rows=not args.no_rows,
    )
    payload: dict[str, Any] = {
        "command": "prompt-eval",
        "method": "prompting baseline (Deshpande et al., 2023, Sec. 4.2)",
        "task": args.task,
        "config": {
            "k_shot": args.k_shot,
            "instructions": args.instructions,
            "example_format": args.example_format,
            "seed": args.seed,
            "limit": args.limit,
            "split": args.split,
        },
        "data": {
            "eval_file": str(eval_file),
            "eval_sha256": file_sha256(eval_file),
            "eval_load": eval_report,
            "rows_evaluated": len(queries),
            "train_file": str(train_file),
            "train_sha256": file_sha256(train_file),
            "train_load": train_report,
            "train_is_eval_file": same_file,
        },
        "backend": backend.describe(),
        **result,
        "cache": cache.describe(),
        "environment": environment_record(),
    }
    m = result["metrics"]
    summary = {
        key: round(m[key], 2) if isinstance(m[key], float) else m[key]
        for key in ("spearman", "pearson", "invalid_percent", "out_of_range_percent", "n", "failed_requests")
    }
    print(json.dumps({"task": args.task, "model": args.model, "k_shot": args.k_shot, **summary}))
    if args.output:
        write_json_atomic(args.output, payload)
        print(f"wrote {args.output}")
    return 0
