"""``finesim index``: build a conditional search index over a corpus, add to it, search it, describe it.

The work is done by :class:`finesim.index.ConditionalIndex` (and :mod:`finesim.index.distributed` with ``--ray``);
see docs/search.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from finesim.cli.common import (
    UsageError,
    add_ray_options,
    add_runtime_options,
    check_output_dir,
    command_parser,
    positive_int,
    ray_wanted,
    say,
)


def _corpus_options(p: argparse.ArgumentParser, *, default_column: str | None) -> None:
    p.add_argument("--corpus", required=True, metavar="FILE", help="corpus file: CSV, TSV, JSONL, Parquet")
    p.add_argument(
        "--text-column",
        default=default_column,
        help="the column holding the texts"
        + ("" if default_column else " (default: the one the index was built from)"),
    )
    p.add_argument("--format", default=None, help="corpus file format when its extension does not tell")
    p.add_argument("--batch-size", type=positive_int, default=64, help="encoding batch size")


def _ray_options(p: argparse.ArgumentParser) -> None:
    add_ray_options(p, ray_help="embed on Ray Data (a local Ray instance unless an address)", actors="encoder actors")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``index`` command and its actions."""
    index = command_parser(
        sub,
        "index",
        help="conditional search: index a corpus once, ask 'similar to X with respect to C'",
        description="Build a conditional search index over a corpus with a bi-, tri-encoder or CASE model, add to "
        "it, search it and describe it. See docs/search.md.",
    )
    actions = index.add_subparsers(dest="index_command", metavar="ACTION")

    p = command_parser(
        actions,
        "build",
        help="index a corpus into a new folder",
        description="Embed a corpus and write a new index folder. A tri-encoder embeds each text once; a bi-encoder "
        "or CASE model embeds the corpus per condition, on the condition's first query or now for --conditions.",
    )
    p.add_argument("--model", required=True, help="model: a finesim folder, sentence-transformers folder or Hub id")
    p.add_argument(
        "--encoder",
        choices=["bi", "tri", "case"],
        default=None,
        help="encoder type (default: from the model folder's marker; bi for a plain model)",
    )
    _corpus_options(p, default_column="text")
    p.add_argument("--output-dir", "-o", required=True, metavar="DIR", help="the new index folder")
    p.add_argument(
        "--conditions",
        default=None,
        metavar="FILE",
        help="bi / CASE: conditions to embed the corpus for now, one a line",
    )
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32", help="storage type of the vectors")
    p.add_argument(
        "--approximate",
        choices=["hnsw", "ivf"],
        default=None,
        help="also build a faiss index of this kind (tri: now; bi/CASE: for --conditions, else on first use)",
    )
    p.add_argument(
        "--first-stage",
        default="auto",
        metavar="self|MODEL|none",
        help="bi / CASE: the condition-independent first stage of two-stage search (docs/search.md): 'self' (a "
        "bi-encoder's own embedding of each text; the default for bi-encoders), another sentence-transformers "
        "model, or 'none' (every new condition then embeds the whole corpus; the default for CASE)",
    )
    p.add_argument(
        "--first-stage-query",
        choices=["conditioned", "plain"],
        default=None,
        help="the query's first-stage vector: 'conditioned', the (query, condition) embedding, or 'plain', the "
        "query's alone (default: conditioned for 'self', plain for another model)",
    )
    _ray_options(p)
    add_runtime_options(p)
    p.set_defaults(func=run_build)

    p = command_parser(
        actions,
        "add",
        help="append a corpus file to an index",
        description="Append the rows of a corpus file to an index (atomically: a failure leaves the index as it was). "
        "Stored conditions are embedded for the new rows too.",
    )
    p.add_argument("index_dir", metavar="DIR", help="the index folder")
    _corpus_options(p, default_column=None)
    _ray_options(p)
    add_runtime_options(p)
    p.set_defaults(func=run_add)

    p = command_parser(
        actions,
        "search",
        help="the corpus texts most similar to a query with respect to a condition",
        description="Print the k corpus texts most similar to --query with respect to --condition, best first; "
        "--json prints [{index, text, score}, ...].",
    )
    p.add_argument("index_dir", metavar="DIR", help="the index folder")
    p.add_argument("--query", required=True, help="the query sentence")
    p.add_argument("--condition", required=True, help="the condition (aspect) to compare under")
    p.add_argument("-k", type=positive_int, default=10, help="how many results")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "--approximate",
        nargs="?",
        const=True,
        default=False,
        choices=["hnsw", "ivf"],
        help="approximate search with faiss (the index's kind, HNSW if none; or name one)",
    )
    p.add_argument(
        "--candidates",
        type=positive_int,
        default=None,
        help="candidates re-scored exactly by an approximate tri-encoder search or a two-stage search "
        "(default: max(100, 10k) and max(200, 10k))",
    )
    p.add_argument(
        "--strategy",
        choices=["auto", "exact", "two-stage"],
        default="auto",
        help="bi / CASE: 'exact' scores every text under the condition (embedding the corpus for a new one), "
        "'two-stage' re-ranks the first stage's candidates; 'auto' (default): exact for a condition stored in the "
        "index, two-stage otherwise when the index has a first stage",
    )
    p.add_argument("--recall", action="store_true", help="with --approximate: also report recall@k against exact")
    p.add_argument("--model", default=None, help="load this model instead of the one the manifest records")
    add_runtime_options(p)
    p.set_defaults(func=run_search)

    p = command_parser(
        actions,
        "info",
        help="describe an index",
        description="Check an index folder and describe it: model, encoder, size, parts, corpus files, stored "
        "conditions, approximate indexes.",
    )
    p.add_argument("index_dir", metavar="DIR", help="the index folder")
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    p.add_argument("--verify", action="store_true", help="also check the SHA-256 of every stored texts file")
    p.set_defaults(func=run_info)

    index.set_defaults(func=lambda args: (index.print_help(), 2)[1])


def read_conditions(path: str) -> list[str]:
    """Conditions from a file, one a line (blank lines skipped, each condition once, in file order)."""
    from finesim.data._io import read_text

    lines = [line.strip() for line in read_text(path, what="conditions file").splitlines()]
    conditions = list(dict.fromkeys(line for line in lines if line))
    if not conditions:
        raise ValueError(f"{path}: no conditions (one a line expected)")
    return conditions


def run_build(args: argparse.Namespace) -> int:
    """``finesim index build``."""
    check_output_dir(args.output_dir)
    conditions = read_conditions(args.conditions) if args.conditions else []
    progress = say(args)
    common: dict[str, Any] = {
        "encoder": args.encoder,
        "conditions": conditions,
        "dtype": args.dtype,
        "approximate": args.approximate,
        "batch_size": args.batch_size,
        "device": args.device,
        "show_progress": not args.no_progress,
        "first_stage": None if args.first_stage == "none" else args.first_stage,
        "first_stage_query": args.first_stage_query,
    }
    if ray_wanted(args):
        from finesim.index.distributed import build_index_ray

        index = build_index_ray(
            args.model,
            args.corpus,
            args.output_dir,
            text_column=args.text_column,
            format=args.format,
            address=args.ray_address,
            workers=args.ray_workers,
            **common,
        )
    else:
        from finesim.index import ConditionalIndex
        from finesim.index.corpus import read_corpus

        corpus = read_corpus(args.corpus, args.text_column, args.format)
        progress(f"read {len(corpus.texts)} texts from {args.corpus}")
        index = ConditionalIndex.build(args.model, corpus.texts, args.output_dir, corpus=[corpus.record], **common)
    progress(
        f"indexed {len(index)} texts with a {index.kind}-encoder into {args.output_dir}"
        + (f" ({len(conditions)} conditions embedded)" if conditions and index.kind != "tri" else "")
    )
    return 0


def run_add(args: argparse.Namespace) -> int:
    """``finesim index add``."""
    from finesim.index.store import IndexStore

    IndexStore.open(args.index_dir)  # a missing or damaged folder is refused before the model loads
    from finesim.index import ConditionalIndex

    index = ConditionalIndex.open(args.index_dir, device=args.device, show_progress=not args.no_progress)
    column = args.text_column or _built_column(index)
    before = len(index)
    if ray_wanted(args):
        from finesim.index.distributed import add_index_ray

        add_index_ray(
            index,
            args.corpus,
            text_column=column,
            format=args.format,
            address=args.ray_address,
            workers=args.ray_workers,
            batch_size=args.batch_size,
        )
    else:
        from finesim.index.corpus import read_corpus

        corpus = read_corpus(args.corpus, column, args.format)
        index.add(corpus.texts, corpus=[corpus.record])
    say(args)(f"added {len(index) - before} texts: {args.index_dir} holds {len(index)}")
    return 0


def _built_column(index: Any) -> str:
    records = index.store.manifest.get("corpus") or []
    return str(records[0].get("text_column") or "text") if records else "text"


def run_search(args: argparse.Namespace) -> int:
    """``finesim index search``."""
    from finesim.index.store import IndexStore

    if args.recall and not args.approximate and args.strategy != "two-stage":
        raise UsageError(
            "--recall compares approximate or two-stage with exact search: add --approximate or --strategy two-stage"
        )
    IndexStore.open(args.index_dir)  # a missing or damaged folder is refused before the model loads
    from finesim.index import ConditionalIndex

    index = ConditionalIndex.open(
        args.index_dir, model=args.model, device=args.device, show_progress=not args.no_progress
    )
    if args.recall and args.strategy == "exact":
        raise UsageError("--recall compares a faster search with exact search: drop --strategy exact")
    options = {"approximate": args.approximate, "candidates": args.candidates, "strategy": args.strategy}
    results = index.search(args.query, args.condition, k=args.k, **options)
    if args.recall:
        report = index.recall([args.query], args.condition, k=args.k, **options)
        what = report["approximate"] or "two-stage search"
        say(args)(f"recall@{args.k} of {what} against exact search: {report['recall']:.3f}")
    if args.json:
        json.dump(results, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    for rank, row in enumerate(results, start=1):
        print(f"{rank:>3}  {row['score']:.4f}  [{row['index']}]  {row['text']}")
    return 0


def run_info(args: argparse.Namespace) -> int:
    """``finesim index info``: checks the folder (and with --verify the texts' hashes) without loading the model."""
    from finesim.index.store import IndexStore

    store = IndexStore.open(args.index_dir)
    if args.verify:
        store.verify_hashes()
    info = store.describe()
    if args.json:
        json.dump(info, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    model = info["model"]
    encoder = info["encoder"]
    head = encoder.get("head")
    print(f"index      {info['path']}")
    print(f"model      {model.get('name') or '(a model object)'} -> {model.get('resolved')}")
    print(f"weights    sha256 {model['sha256']}")
    print(f"encoder    {encoder['type']}" + (f" (head {head['kind']}; stored: {head['stored']})" if head else ""))
    print(f"vectors    {info['count']} x {info['dims']['index']} {info['dtype']} in {len(info['parts'])} part(s)")
    print(f"on disk    {info['bytes'] / 2**20:.1f} MiB")
    for record in info["corpus"]:
        print(f"corpus     {record.get('path')} ({record.get('rows')} rows, column {record.get('text_column')!r})")
    for condition in info["conditions"]:
        print(f"condition  {condition['condition']!r} ({condition['parts']}/{len(info['parts'])} parts embedded)")
    if info["approximate"]:
        print(f"approx.    {info['approximate']['kind']} {info['approximate']['params']}")
    for name in info["approximate_indexes"]:
        print(f"faiss      ann/{name}.faiss")
    print(f"created    {info['created']} by finesim {info['finesim_version']}; updated {info['updated']}")
    if args.verify:
        print("verified   every texts file matches its recorded SHA-256")
    return 0
