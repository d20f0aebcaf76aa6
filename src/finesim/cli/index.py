"""``finesim index``: build a conditional search index over a corpus, add to it, search it, describe it.

The work is done by :class:`finesim.index.ConditionalIndex` (and :mod:`finesim.index.distributed` with ``--ray``);
see docs/search.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from finesim.cli.common import (
    UsageError,
    add_ray_options,
    add_runtime_options,
    check_output_dir,
    command_parser,
    positive_float,
    positive_int,
    ray_wanted,
    rerank_depth,
    rerank_feedback,
    say,
    show_help,
)
from finesim.index.two_stage import MAP_RIDGE, MAP_SAMPLE, QUERY_MODES, takes_feedback


def _corpus_options(p: argparse.ArgumentParser, *, default_column: str | None) -> None:
    p.add_argument("--corpus", required=True, metavar="FILE", help="corpus file: CSV, TSV, JSONL, Parquet")
    p.add_argument(
        "--text-column",
        default=default_column,
        help="the column holding the texts"
        + ("" if default_column else " (default: the one the index was built from)"),
    )
    p.add_argument("--format", default=None, help="corpus file format when its extension does not tell")
    p.add_argument(
        "--split",
        default=None,
        metavar="NAME",
        help="the split to read from a dataset folder (save_to_disk) or Hub dataset that has several",
    )
    recorded = "" if default_column else " (default: the one the index was built with)"
    p.add_argument(
        "--id-column",
        default=None,
        metavar="COL",
        help="a column of unique IDs (strings or integers) that results carry as 'id'" + recorded,
    )
    p.add_argument(
        "--metadata-columns",
        default=None,
        metavar="A,B",
        help="columns that results carry as 'metadata' and search --where filters on" + recorded,
    )
    p.add_argument("--batch-size", type=positive_int, default=64, help="encoding batch size")


def _first_stage_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--first-stage",
        default=None,
        metavar="PATH",
        help="where the index's first-stage model (another model, named at build) is now, when its folder has moved "
        "(default: the one the manifest records); loaded by a two-stage search or an add only",
    )


def _check_first_stage_option(args: argparse.Namespace, manifest: dict[str, Any]) -> None:
    """``--first-stage PATH`` (search, add) only for an index whose first stage is another model, before any load."""
    model = (manifest.get("first_stage") or {}).get("model")
    if args.first_stage is not None and model in (None, "self"):
        what = "none" if model is None else "the index's own model ('self')"
        raise UsageError(
            f"--first-stage names where the index's first-stage model is now, but the first stage of "
            f"{args.index_dir} is {what}: drop it"
        )


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
        help="bi / CASE: the first stage of two-stage search (docs/search.md): 'self' (a bi-encoder's own embedding "
        "of each text; the default for bi-encoders), another sentence-transformers model, a finesim tri-encoder "
        "folder (e.g. a distilled student: its own top N under the condition are the candidates), or 'none' (every "
        "new condition then embeds the whole corpus; the default for CASE)",
    )
    p.add_argument(
        "--first-stage-query",
        choices=list(QUERY_MODES),
        default=None,
        help="the query's first stage: 'conditioned', the (query, condition) embedding, 'plain', the query's alone, "
        "'tri', a tri-encoder's ranking under the condition, or 'mapped' ('self' only: the (query, condition) "
        "embedding against the corpus vectors mapped under the condition by a linear map fitted on its first query; "
        "docs/search.md) (default: conditioned for 'self', tri for a tri-encoder folder, plain for another model)",
    )
    _ray_options(p)
    add_runtime_options(p)
    p.set_defaults(func=run_build)

    p = command_parser(
        actions,
        "add",
        help="append a corpus file to an index",
        description="Append the rows of a corpus file to an index (atomically: a failure or a kill leaves the index "
        "as it was). Stored conditions are embedded for the new rows before the commit. A file already in the index "
        "(same SHA-256), or rows identical to a part's, add nothing.",
    )
    p.add_argument("index_dir", metavar="DIR", help="the index folder")
    _corpus_options(p, default_column=None)
    p.add_argument(
        "--model", default=None, help="load this model instead of the one the manifest records (a folder since moved)"
    )
    _first_stage_option(p)
    _ray_options(p)
    add_runtime_options(p)
    p.set_defaults(func=run_add)

    p = command_parser(
        actions,
        "search",
        help="the corpus texts most similar to a query with respect to a condition (or without one)",
        description="Print the k corpus texts most similar to --query with respect to --condition, best first; "
        "--json prints [{index, text, score}, ...] (with id and metadata when the index has them). --no-condition "
        "ranks by the model's similarity of the texts alone (a bi-encoder index's first-stage vectors, a "
        'tri-encoder\'s stage vectors; each JSON result then says "condition": null).',
    )
    p.add_argument("index_dir", metavar="DIR", help="the index folder")
    p.add_argument("--query", required=True, help="the query sentence")
    asked = p.add_mutually_exclusive_group(required=True)
    asked.add_argument("--condition", help="the condition (aspect) to compare under")
    asked.add_argument(
        "--no-condition",
        action="store_true",
        help="search without a condition: the plain similarity of the query and the texts alone",
    )
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
    p.add_argument(
        "--where",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="only rows whose metadata KEY equals VALUE (repeatable: all must hold); an exact search (or exact first "
        "stage) filters before its top k (or N); an approximate one filters its candidates, so it may return fewer "
        "than k",
    )
    p.add_argument(
        "--rerank-depth",
        type=rerank_depth,
        default=None,
        metavar="all|FIRST,STEP,PATIENCE",
        help="a two-stage search: re-rank all its candidates ('all', the default), or best first, FIRST of them then "
        "STEP more at a time, stopping after PATIENCE chunks in a row that change nothing in the top k (e.g. "
        "25,25,3: fewer encodes for an easy query, up to --candidates for a hard one; docs/search.md)",
    )
    p.add_argument(
        "--rerank-feedback",
        type=rerank_feedback,
        default=None,
        metavar="none|local-map[:ROUNDS,RIDGE,POOL[,earlier|own]]",
        help="a two-stage search of an index whose first stage is 'self' (conditioned or mapped): re-rank its N "
        "candidates in rounds, each after the first taken by a map fitted on the candidates re-ranked so far "
        "('local-map', the default for such an index: 4 rounds, ridge 0.1, a pool of the ranking's top 10 N; the "
        "conditioned ranking's fit also takes the pairs the condition's earlier searches re-ranked, 'own': not), or "
        "the first stage's top N ('none'); docs/search.md",
    )
    p.add_argument(
        "--map-sample",
        type=positive_int,
        default=None,
        help="an index built with --first-stage-query mapped: corpus texts embedded under a new condition to fit its "
        "map; fewer make a new condition's first query cheaper and the candidates worse; used by two-stage searches "
        f"only (default: {MAP_SAMPLE})",
    )
    p.add_argument(
        "--map-ridge",
        type=positive_float,
        default=None,
        help="an index built with --first-stage-query mapped: the fit's ridge toward the identity "
        f"(default: {MAP_RIDGE})",
    )
    p.add_argument(
        "--recall",
        action="store_true",
        help="with --approximate or --strategy two-stage: also report recall@k against exact search (which stores "
        "the condition's corpus embeddings in the index)",
    )
    p.add_argument("--model", default=None, help="load this model instead of the one the manifest records")
    _first_stage_option(p)
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
    p.add_argument(
        "--verify",
        action="store_true",
        help="also check every file (texts, IDs / metadata, vectors, condition caches, faiss indexes) against its "
        "recorded SHA-256",
    )
    p.add_argument("--no-progress", action="store_true", help="hide progress bars (info shows none)")
    p.set_defaults(func=run_info)

    p = command_parser(
        actions,
        "convert",
        help="copy an index with its vectors stored as another dtype",
        description="Copy an index into a new folder with its vectors cast to --dtype, without embedding anything "
        "again: float16 halves the size and scans a first stage in float16 (docs/search.md). Texts, IDs, metadata "
        "and stored conditions (each part they cover) are carried over; faiss indexes and fitted maps are built "
        "again on first use. An interrupted or refused conversion leaves no index files in the new folder.",
    )
    p.add_argument("index_dir", metavar="DIR", help="the index folder (only read)")
    p.add_argument("--output-dir", "-o", required=True, metavar="DIR", help="the new index folder")
    p.add_argument("--dtype", choices=["float32", "float16"], required=True, help="storage type of the copy's vectors")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=run_convert)

    index.set_defaults(func=show_help(index))


def read_conditions(path: str) -> list[str]:
    """Conditions from a file, one a line (blank lines skipped, each condition once, in file order)."""
    from finesim.data._io import read_text

    lines = [line.strip() for line in read_text(path, what="conditions file").splitlines()]
    conditions = list(dict.fromkeys(line for line in lines if line))
    if not conditions:
        raise ValueError(f"{path}: no conditions (one a line expected)")
    return conditions


def _meta_columns(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """``--id-column`` and ``--metadata-columns`` (refused with --ray)."""
    from finesim.index.corpus import parse_columns

    try:
        columns = parse_columns(args.metadata_columns)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if (args.id_column or columns) and ray_wanted(args):
        raise UsageError("--id-column and --metadata-columns are not supported with --ray yet: drop --ray")
    if args.split is not None and ray_wanted(args):
        raise UsageError("--split picks a split of a dataset folder, which --ray does not read (it reads files)")
    return args.id_column, columns


def run_build(args: argparse.Namespace) -> int:
    """``finesim index build``."""
    check_output_dir(args.output_dir)
    id_column, metadata_columns = _meta_columns(args)
    conditions = read_conditions(args.conditions) if args.conditions else []
    progress = say(args)
    if args.first_stage not in ("auto", "self", "none"):  # another model: its query mode, checked before any work
        from finesim.index.two_stage import TRI, other_model_query

        if other_model_query(args.first_stage, args.first_stage_query) == TRI:
            progress(
                f"first stage: {args.first_stage} is a tri-encoder: its own top N under each condition are the "
                "candidates the index's model re-ranks (--first-stage-query tri)"
            )
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

        corpus = read_corpus(
            args.corpus, args.text_column, args.format, id_column=id_column, metadata_columns=metadata_columns,
            split=args.split,
        )  # fmt: skip
        progress(f"read {len(corpus.texts)} texts from {args.corpus}")
        index = ConditionalIndex.build(
            args.model,
            corpus.texts,
            args.output_dir,
            corpus=[corpus.record],
            ids=corpus.ids,
            metadata=corpus.metadata,
            **common,
        )
    progress(
        f"indexed {len(index)} texts with a {index.encoder}-encoder into {args.output_dir}"
        + (f" ({len(conditions)} conditions embedded)" if conditions and index.encoder != "tri" else "")
    )
    return 0


def run_add(args: argparse.Namespace) -> int:
    """``finesim index add``: the corpus is read and checked against the index (a file or rows already in it add
    nothing) before the model is loaded."""
    from finesim.index.corpus import file_record, meta_rows, read_corpus
    from finesim.index.store import IndexStore, duplicate_message, find_duplicate, lines_sha256

    store = IndexStore.open(args.index_dir)
    manifest = store.manifest
    _check_first_stage_option(args, manifest)
    column = args.text_column or _built(manifest, "text_column") or "text"
    id_column = args.id_column or (_built(manifest, "id_column") if store.fields["id"] else None)
    metadata_columns = _meta_columns(args)[1]
    if not metadata_columns and store.fields["metadata"]:
        metadata_columns = list(_built(manifest, "metadata_columns") or [])
    progress = say(args)
    if ray_wanted(args):
        if store.fields["id"] or store.fields["metadata"]:
            raise UsageError("this index has IDs / metadata, which --ray does not read yet: add without --ray")
        duplicate = find_duplicate(manifest, corpus=[file_record(args.corpus, 0, column, args.format)])
    else:
        corpus = read_corpus(
            args.corpus, column, args.format, id_column=id_column, metadata_columns=metadata_columns, split=args.split
        )
        rows = meta_rows(len(corpus.texts), corpus.ids, corpus.metadata)
        duplicate = find_duplicate(
            manifest,
            corpus=[corpus.record],
            texts_sha256=lines_sha256(corpus.texts),
            meta_sha256=None if rows is None else lines_sha256(rows),
        )
    if duplicate is not None:
        progress(duplicate_message(duplicate))
        return 0
    from finesim.index import ConditionalIndex

    index = ConditionalIndex.open(
        args.index_dir, model=args.model, device=args.device, show_progress=not args.no_progress,
        first_stage=args.first_stage,
    )  # fmt: skip
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
            device=args.device,
            model=args.model,
        )
    else:
        index.add(corpus.texts, ids=corpus.ids, metadata=corpus.metadata, corpus=[corpus.record])
    added = len(index) - before
    if added == 0:
        progress(f"{args.corpus}: these rows are already in the index: nothing added")
        return 0
    progress(f"added {added} texts: {args.index_dir} holds {len(index)}")
    return 0


def _built(manifest: dict[str, Any], key: str) -> Any:
    """What the first corpus file the index records says about ``key`` (its text, ID or metadata columns)."""
    for record in manifest.get("corpus") or []:
        if record.get(key):
            return record[key]
    return None


def run_search(args: argparse.Namespace) -> int:
    """``finesim index search``."""
    from finesim.index.store import IndexStore

    if args.recall and not args.approximate and args.strategy != "two-stage":
        raise UsageError(
            "--recall compares approximate or two-stage with exact search: add --approximate or --strategy two-stage"
        )
    store = IndexStore.open(args.index_dir)  # a missing or damaged folder is refused before the model loads
    _check_first_stage_option(args, store.manifest)
    if args.no_condition:
        from finesim.index.two_stage import plain_search_refusal

        if args.strategy == "two-stage":
            raise UsageError("--no-condition ranks the stored embeddings of the texts alone: drop --strategy two-stage")
        refusal = plain_search_refusal(store.manifest)
        if refusal is not None:  # before the model loads
            raise ValueError(f"{store.root}: {refusal}")
    from finesim.index import ConditionalIndex

    where = parse_where(args.where)
    if where and args.recall:
        raise UsageError("--recall measures an unfiltered search: drop --where")
    stage = store.manifest.get("first_stage") or {}
    if (args.map_sample is not None or args.map_ridge is not None) and stage.get("query") != "mapped":
        raise UsageError(
            "--map-sample and --map-ridge tune the 'mapped' first stage, but this index's first stage query is "
            f"{stage.get('query') or 'none'}: build it with --first-stage-query mapped, or drop them"
        )
    if args.rerank_depth is not None and not stage:
        raise UsageError(
            "--rerank-depth applies to two-stage searches, but this index has no first stage (it searches exactly): "
            "drop it"
        )
    if args.rerank_feedback is not None and not takes_feedback(stage.get("model"), stage.get("query")):
        raise UsageError(
            "--rerank-feedback needs an index whose first stage is the model's own embeddings ('self') with the "
            f"conditioned or mapped query; this index's first stage is {stage.get('model') or 'none'}"
            f"{' (query ' + repr(stage.get('query')) + ')' if stage else ' (it searches exactly)'}: drop it"
        )
    tri = store.manifest["encoder"]["type"] == "tri"
    exact = not args.approximate and (tri or not stage or args.no_condition or args.strategy == "exact")
    if args.candidates is not None and exact:
        raise UsageError(
            "--candidates sets how many candidates an approximate or two-stage search re-scores, but this search is "
            "exact (no --approximate, and no two-stage search here): drop it, or add --approximate"
        )
    index = ConditionalIndex.open(
        args.index_dir, model=args.model, device=args.device, show_progress=not args.no_progress,
        first_stage=args.first_stage,
    )  # fmt: skip
    if args.map_sample is not None:
        index.map_sample = args.map_sample
    if args.map_ridge is not None:
        index.map_ridge = args.map_ridge
    if args.rerank_depth is not None:
        index.rerank_depth = args.rerank_depth  # "all" or "F,S,P": parsed by the index when set
    if args.rerank_feedback is not None:
        index.rerank_feedback = args.rerank_feedback  # "none" or "local-map[:R,RIDGE,P]": parsed when set
    options = {"approximate": args.approximate, "candidates": args.candidates, "strategy": args.strategy}
    condition = None if args.no_condition else args.condition
    results = index.search(args.query, condition, k=args.k, where=where, **options)
    stage = index.last_first_stage()
    if condition is None:
        say(args)("no condition: ranked by the model's similarity of the query and the texts alone")
    elif stage is not None:
        say(args)(f"two-stage search: the {stage} first stage's candidates re-ranked under the condition")
    if where and not results:
        shown = ", ".join(f"{key}={value!r}" for key, value in where.items())
        matching = index.count_where(where)
        if matching:  # an approximate search (or first stage) filters its candidates
            say(args)(
                f"none of the {matching} rows matching --where {shown} was among the candidates: raise --candidates"
            )
        else:
            say(args)(f"no row matches --where {shown} (values match exactly)")
    if args.recall:
        report = index.recall([args.query], condition, k=args.k, **options)
        approximate = report["approximate"]
        if report["strategy"] == "exact":
            what = str(approximate)
        else:
            what = f"{report['strategy']} search" + (f" (first stage {approximate})" if approximate else "")
        say(args)(f"recall@{args.k} of {what} against exact search: {report['recall']:.3f}")
    if args.json:
        print(json.dumps(results, ensure_ascii=False))
        return 0
    for rank, row in enumerate(results, start=1):
        ident = f" id={row['id']}" if "id" in row else ""
        print(f"{rank:>3}  {row['score']:.4f}  [{row['index']}]{ident}  {row['text']}")
    return 0


def parse_where(items: list[str] | None) -> dict[str, str]:
    """``--where KEY=VALUE`` (repeatable) as a filter, key and value stripped of surrounding spaces; a key given twice
    or an item without ``=`` is a usage error."""
    where: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--where {item!r}: write KEY=VALUE, e.g. --where lang=en")
        if key in where:
            raise UsageError(f"--where: {key!r} is given twice (every --where must hold: one value per key)")
        where[key] = value.strip()
    return where


def _gone(path: Any) -> str:
    """`` (not found here)`` after a recorded absolute path that names nothing on this machine now (an index moved
    or copied elsewhere: a search loads the model by its name, or by --model); else nothing."""
    if not isinstance(path, str) or not Path(path).is_absolute() or Path(path).exists():
        return ""
    return " (not found here)"


def run_info(args: argparse.Namespace) -> int:
    """``finesim index info``: checks the folder (and with --verify the texts' hashes) without loading the model."""
    from finesim.index.store import IndexStore

    store = IndexStore.open(args.index_dir)
    verified = store.verify_hashes() if args.verify else None
    info = store.describe()
    if verified is not None:
        info["verified"] = verified
    if args.json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
        return 0
    model = info["model"]
    encoder = info["encoder"]
    head = encoder.get("head")
    print(f"index      {info['path']}")
    print(
        f"model      {model.get('name') or '(a model object)'} -> {model.get('resolved')}{_gone(model.get('resolved'))}"
    )
    print(f"weights    sha256 {model['sha256']}")
    inputs = model.get("inputs_sha256") or {}
    if inputs:  # an index built before they were recorded has none (its model's weights alone are checked)
        print("inputs     " + ", ".join(f"{part} sha256 {digest[:16]}" for part, digest in inputs.items()))
    print(f"encoder    {encoder['type']}" + (f" (head {head['kind']}; stored: {head['stored']})" if head else ""))
    print(f"vectors    {info['count']} x {info['dims']['index']} {info['dtype']} in {len(info['parts'])} part(s)")
    fields = info["fields"]
    if fields["id"] or fields["metadata"]:
        keys = ", ".join(fields["metadata_keys"]) or "none"
        shown = (["id"] if fields["id"] else []) + ([f"metadata ({keys})"] if fields["metadata"] else [])
        print(f"rows carry {' and '.join(shown)}")
    print(f"on disk    {info['bytes'] / 2**20:.1f} MiB")
    for record in info["corpus"]:
        where = f"{record.get('path')}{_gone(record.get('path'))}"
        print(f"corpus     {where} ({record.get('rows')} rows, column {record.get('text_column')!r})")
    for condition in info["conditions"]:
        print(f"condition  {condition['condition']!r} ({condition['parts']}/{len(info['parts'])} parts embedded)")
    stage = info["first_stage"]
    if stage:
        what = {"conditioned": "query conditioned", "plain": "query plain", "tri": "tri-encoder, its top N",
                "mapped": "query mapped"}  # fmt: skip
        head = f", head {stage['head']}" if stage.get("head") else ""
        sha = f", sha256 {stage['sha256'][:16]}" if stage.get("sha256") else ""
        mode = what.get(stage["query"], stage["query"])
        print(f"1st stage  {stage['model']} ({mode}{head}; {stage['dim']} dims{sha})")
    if info["approximate"]:
        from finesim.index.approximate import ann_params

        kind, params = info["approximate"]["kind"], info["approximate"]["params"]
        try:  # the parameters searches use: a manifest written before a parameter existed gets its default
            params = ann_params(kind, params)
        except ValueError:  # a parameter this finesim does not know (a newer one wrote it): shown as recorded
            pass
        print(f"approx.    {kind} {params}")
    for name in info["approximate_indexes"]:
        print(f"faiss      ann/{name}.faiss")
    print(f"created    {info['created']} by finesim {info['finesim_version']}; updated {info['updated']}")
    if verified is not None:
        print(f"verified   {verified['verified']} files match their recorded SHA-256")
        if verified["unrecorded"]:
            listed = ", ".join(verified["unrecorded"][:3]) + (" ..." if len(verified["unrecorded"]) > 3 else "")
            print(f"unchecked  {len(verified['unrecorded'])} files have no recorded checksum (older finesim): {listed}")
    return 0


def run_convert(args: argparse.Namespace) -> int:
    """``finesim index convert``: casts the stored vectors into a new folder (no model is loaded)."""
    from finesim.index.convert import convert_index

    store = convert_index(args.index_dir, args.output_dir, args.dtype, show_progress=not args.no_progress)
    info = store.describe()
    print(f"wrote {store.root}: {info['count']} x {info['dims']['index']} {info['dtype']} in {len(info['parts'])} "
          f"part(s), {len(info['conditions'])} stored condition(s), {info['bytes'] / 2**20:.1f} MiB")  # fmt: skip
    return 0
