"""``finesim serve``: an HTTP server for any finesim scorer (docs/serving.md)."""

from __future__ import annotations

import argparse
import os
import sys

from finesim.cli.common import (
    UsageError,
    add_runtime_options,
    command_parser,
    log_level,
    map_fit_yield,
    non_negative_int,
    positive_float,
    positive_int,
    rerank_depth,
    rerank_feedback,
    say,
    verbosity,
)
from finesim.serving.settings import DEFAULT_MAX_BATCH_INPUTS  # stdlib only: no serve extra needed

ENCODERS = ("bi", "tri", "cross", "case")


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0: any free port)."""
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be <= 65535, got {value}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``serve`` sub-command."""
    p = command_parser(
        sub,
        "serve",
        help="serve a model over HTTP (similarity, rerank, embeddings, index search)",
        description="An HTTP server (FastAPI + uvicorn) for any finesim scorer:\n"
        "  POST /similarity, /rerank, /v1/embeddings (OpenAI-compatible)\n"
        "  POST /search over a conditional index built with the same model (--index DIR)\n"
        "  GET /health, /info, /metrics (Prometheus; these three need no API key)\n"
        "  GET /v1/models (OpenAI-compatible); /docs, the interactive API page (on by default on loopback)\n"
        "Requests that arrive close together are scored in one micro-batch, up to --max-batch-inputs inputs (and\n"
        "--max-batch-tokens tokens); a larger request is split over several. SIGTERM stops it gracefully:\n"
        "requests in flight are answered, then it exits 0. Needs the serve extra: pip install 'finesim[serve]'.\n"
        "See docs/serving.md.",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="MODEL",
        help="Hub id, alias (minilm), sentence-transformers folder, or a folder saved by finesim",
    )
    p.add_argument(
        "--encoder",
        choices=ENCODERS,
        default=None,
        help="model type (default: from the folder's marker; a model without one is a bi-encoder)",
    )
    p.add_argument("--host", default="127.0.0.1", metavar="HOST", help="address to listen on")
    p.add_argument(
        "--docs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve the interactive API page at /docs (its scripts load from a CDN; default: on for a loopback --host)",
    )
    p.add_argument(
        "--port", type=port_number, metavar="PORT", default=8080, help="port to listen on (0: any free port)"
    )
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help="require 'Authorization: Bearer KEY' on every endpoint but /health, /info and /metrics, KEY being "
        "the value of this environment variable",
    )
    p.add_argument(
        "--max-request-bytes", metavar="N", type=positive_int, default=1 << 20, help="largest request body (413 above)"
    )
    p.add_argument(
        "--max-items",
        metavar="N",
        type=positive_int,
        default=256,
        help="most pairs, texts or inputs per request, and most /search results (k) (422 above)",
    )
    p.add_argument(
        "--max-concurrent",
        metavar="N",
        type=positive_int,
        default=64,
        help="most scoring requests in flight; one more is answered 429 at once",
    )
    p.add_argument(
        "--max-text-chars", metavar="N", type=positive_int, default=4096, help="longest text in characters (422 above)"
    )
    p.add_argument(
        "--body-timeout",
        metavar="SECONDS",
        type=positive_float,
        default=30.0,
        help="seconds a request's body may take to arrive whole (408 after them): a client that sends half a body "
        "and goes silent is let go; the body is read before the request counts towards --max-concurrent",
    )
    p.add_argument(
        "--max-batch-inputs",
        metavar="N",
        type=positive_int,
        default=None,
        help="most inputs (pairs or texts) in one micro-batch: requests are gathered across clients up to it, and a "
        "request larger than what is left is split over several batches (1: one input at a time) (default: 64)",
    )
    # its name until 0.1: "batch size" is the model's forward batch everywhere else (--inference-batch-size here)
    p.add_argument("--batch-size", dest="old_batch_size", metavar="N", type=positive_int, help=argparse.SUPPRESS)
    p.add_argument(
        "--inference-batch-size",
        metavar="N",
        type=positive_int,
        default=64,
        help="the model's forward batch inside one micro-batch: its inputs are sorted by length and encoded N at a "
        "time (less padding with smaller N)",
    )
    p.add_argument(
        "--max-batch-tokens",
        metavar="N",
        type=positive_int,
        default=None,
        help="also bound a micro-batch by tokens (what the model reads, counted with its tokenizer), as "
        "text-embeddings-inference's --max-batch-tokens (default: no token budget, --max-batch-inputs alone)",
    )
    p.add_argument(
        "--max-batch-requests",
        metavar="N",
        type=positive_int,
        default=None,
        help="also bound a micro-batch by requests (default: no bound); 1 with --max-batch-inputs at least --max-items "
        "serves one request at a time",
    )
    p.add_argument(
        "--batch-wait-ms",
        metavar="MS",
        type=non_negative_int,
        default=5,
        help="how long to wait for more requests after the first one of a micro-batch",
    )
    p.add_argument(
        "--cache-size",
        metavar="N",
        type=non_negative_int,
        default=10_000,
        help="entries of the embedding LRU cache (0: off)",
    )
    group = p.add_argument_group("conditional search (POST /search)")
    group.add_argument(
        "--index",
        default=None,
        metavar="DIR",
        help="serve POST /search over this index folder (finesim index build), built with the same model: its "
        "weights hash is checked at start-up. Without it /search answers 404 NoIndex",
    )
    group.add_argument(
        "--conditions",
        default=None,
        metavar="FILE",
        help="bi-encoder / CASE index: embed the corpus for these conditions (one a line) at start-up, before "
        "/health answers 200, instead of on each condition's first query",
    )
    group.add_argument(
        "--no-map-wait",
        dest="map_wait",
        action="store_false",
        help="a 'mapped' index (--first-stage-query mapped): answer a new condition's searches at once while its "
        "map is fitted in the background (with the map of the nearest condition the index holds, else the "
        "'conditioned' first stage), instead of holding its first search until the fit ends (2048 texts embedded: "
        "about 20 s at 50k texts with MiniLM on 2 cores)",
    )
    group.add_argument(
        "--no-map-borrow",
        dest="map_borrow",
        action="store_false",
        help="with --no-map-wait: answer a new condition's searches with the 'conditioned' first stage until its own "
        "map is fitted, never with the map of the nearest condition held",
    )
    group.add_argument(
        "--map-fit-yield",
        type=map_fit_yield,
        default=None,
        metavar="SECONDS",
        help="with --no-map-wait: how long a map's fit in the background waits, before each of its steps, for a "
        "moment when no /search runs (default: 1; 0: no waiting, the fit taking turns with the searches at the model "
        "lock; at most 60; docs/search.md)",
    )
    group.add_argument(
        "--rerank-depth",
        type=rerank_depth,
        default=None,
        metavar="all|FIRST,STEP,PATIENCE",
        help="/search's two-stage searches: re-rank all their candidates ('all', the default), or best first, FIRST "
        "of them then STEP more at a time, stopping after PATIENCE chunks in a row that change nothing in the top k "
        "(e.g. 25,25,3; docs/search.md)",
    )
    group.add_argument(
        "--rerank-feedback",
        type=rerank_feedback,
        default=None,
        metavar="none|local-map[:ROUNDS,RIDGE,POOL[,earlier|own]]",
        help="/search's two-stage searches on an index whose first stage is 'self': re-rank in rounds steered by a "
        "map fitted on the candidates re-ranked so far ('local-map', the index's default; the conditioned "
        "ranking's fit also takes the pairs the condition's earlier searches re-ranked, 'own': not) or the first "
        "stage's top N ('none'); docs/search.md",
    )
    group.add_argument(
        "--first-stage",
        default=None,
        metavar="PATH",
        help="where the index's first-stage model (another model than the served one, named at build) is now, when "
        "its folder has moved (default: the one the manifest records); checked as at build",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="server processes behind the one port, each with its own model and micro-batches (default: 1)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="torch threads per process (default: torch's choice with one worker, else the cores divided among the "
        "workers)",
    )
    add_runtime_options(p)
    p.set_defaults(func=run)


def max_batch_inputs(args: argparse.Namespace) -> int:
    """``--max-batch-inputs``, or its old name ``--batch-size`` (still read, with a warning on stderr that names the
    new one: elsewhere a batch size is the model's forward batch, ``--inference-batch-size`` here); both at once
    with different values is a usage error."""
    new, old = args.max_batch_inputs, getattr(args, "old_batch_size", None)
    if old is None:
        return DEFAULT_MAX_BATCH_INPUTS if new is None else int(new)
    if new is not None and new != old:
        raise UsageError(f"--batch-size {old} and --max-batch-inputs {new}: --batch-size is its old name; give one")
    print(
        f"finesim serve: warning: --batch-size is now --max-batch-inputs (the micro-batch's most inputs); "
        f"read as --max-batch-inputs {old}",
        file=sys.stderr,
        flush=True,
    )
    return int(old)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or Ctrl-C."""
    batch_inputs = max_batch_inputs(args)
    api_key = None
    if args.api_key_env is not None:
        api_key = os.environ.get(args.api_key_env, "")
        if not api_key.strip():
            raise UsageError(f"--api-key-env {args.api_key_env}: the environment variable is unset or empty")
    conditions: tuple[str, ...] = ()
    if args.conditions is not None:
        if args.index is None:
            raise UsageError("--conditions needs --index: they are the conditions to prepare in the index")
        from finesim.cli.index import read_conditions

        conditions = tuple(read_conditions(args.conditions))
    if not args.map_wait and args.index is None:
        raise UsageError("--no-map-wait needs --index: it applies to a 'mapped' index's new conditions")
    if not args.map_borrow and args.map_wait:
        raise UsageError(
            "--no-map-borrow needs --no-map-wait: a map is borrowed only while a new condition's own is fitted"
        )
    if args.map_fit_yield is not None and args.map_wait:
        raise UsageError("--map-fit-yield needs --no-map-wait: only a map fitted in the background waits for gaps")
    if args.rerank_depth is not None and args.index is None:
        raise UsageError("--rerank-depth needs --index: it applies to /search's two-stage searches")
    if args.first_stage is not None and args.index is None:
        raise UsageError("--first-stage needs --index: it says where the index's first-stage model is now")
    if args.rerank_feedback is not None and args.index is None:
        raise UsageError("--rerank-feedback needs --index: it applies to /search's two-stage searches")
    if args.index is not None:
        from finesim.index.store import IndexStore
        from finesim.index.two_stage import takes_feedback

        store = IndexStore.open(args.index)  # a missing or damaged folder fails now, before the model loads
        query = (store.manifest.get("first_stage") or {}).get("query")
        if args.rerank_depth is not None and not store.manifest.get("first_stage"):
            raise UsageError(
                f"--rerank-depth: the index {args.index} has no first stage (it searches exactly), so nothing is "
                "re-ranked; leave it out"
            )
        stage = store.manifest.get("first_stage") or {}
        if args.rerank_feedback is not None and not takes_feedback(stage.get("model"), stage.get("query")):
            raise UsageError(
                f"--rerank-feedback: the index {args.index} has no 'self' first stage (the model's own embeddings) "
                "with the conditioned or mapped query, which feedback needs; leave it out"
            )
        if not args.map_wait and query != "mapped":
            raise UsageError(
                f"--no-map-wait: the index {args.index} fits no maps (its first stage's query is {query!r}, not "
                "'mapped'); leave it out, or build the index with --first-stage-query mapped"
            )
    try:
        from finesim.serving.server import serve
    except ImportError as err:
        raise ImportError(f"finesim serve needs the serve extra (pip install 'finesim[serve]'): {err}") from None
    from finesim.serving.settings import ServeSettings

    settings = ServeSettings(
        model=args.model,
        encoder=args.encoder,
        host=args.host,
        port=args.port,
        api_key=api_key,
        max_request_bytes=args.max_request_bytes,
        max_items=args.max_items,
        max_concurrent=args.max_concurrent,
        max_text_chars=args.max_text_chars,
        body_timeout_s=args.body_timeout,
        max_batch_inputs=batch_inputs,
        inference_batch_size=args.inference_batch_size,
        max_batch_tokens=args.max_batch_tokens,
        max_batch_requests=args.max_batch_requests,
        batch_wait_ms=float(args.batch_wait_ms),
        cache_size=args.cache_size,
        device=args.device,
        index=args.index,
        index_conditions=conditions,
        progress=not (args.no_progress or verbosity(args)[1]),
        map_wait=args.map_wait,
        map_borrow=args.map_borrow,
        map_fit_yield=args.map_fit_yield,
        rerank_depth=args.rerank_depth,
        rerank_feedback=args.rerank_feedback,
        first_stage=args.first_stage,
        docs=args.docs,
        workers=args.workers,
        threads=args.threads,
    )
    return serve(settings, say=say(args), log_level=log_level(args))
