"""Benchmark CASE with a plain (MLM-style) sentence encoder on the re-annotated C-STS.

Splits: model selection (best epoch, best setting) on a development split carved from train.csv (10% of the
sentence pairs, both conditions of a pair together, seed 42); numbers are reported on validation.csv
(labelled rows only). The paper's validation[1983:] test split is not reproducible here (the rest of the
validation file is not distributed).

Measures: the unsupervised settings of the paper's Table 1 for an MLM encoder (CONC(s+c), CONC(c+s), each
without "− c" and with it, the latter both un-normalised as the reference and normalised first), the supervised
projection (linear vs non-linear at the model width and at k=512), a dimension sweep, isotropy (I_iso,
embedding-to-mean cosines, PNG histograms), wall times (cold embedding, cache reuse, training), trainable
parameters, a save/reload round trip of the dev-selected model, the same model end to end through the CLI
(`finesim case train`, then `finesim evaluate` on the cache), a 1- vs 2-thread probe, and a comparison block
against the fine-tuned bi-encoder read from its own results file (with the differences between the two set-ups
listed).

Run under the CPU lock:
    flock /tmp/finesim-cpu.lock nohup python benchmarks/case.py --cache-dir /tmp/finesim-case-cache \
        > /tmp/case-bench.log 2>&1 &
Smoke test: add --limit 200 --out /tmp/case_smoke.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from finesim.case import (
    CaseModel,
    ConditionAwareEncoder,
    PairEmbeddings,
    PromptFormat,
    TrainConfig,
    embed_pairs,
    evaluate_pairs,
    isotropy_summary,
    save_histograms,
    split_by_pair,
    sweep_dimensions,
    train_projection,
)
from finesim.case.data import split_summary
from finesim.case.isotropy import cosine_to_mean
from finesim.case.options import parse_dims
from finesim.data import read_csts
from finesim.evaluation.metrics import spearman
from finesim.evaluation.scoring import EmbeddingScorer
from finesim.models import load_sentence_model
from finesim.paths import data_root
from finesim.results import environment_record, file_sha256, path_roots, portable, write_json_atomic

# label: (formulation, subtract_condition, normalize_before_subtract). "raw" is the reference's "− c" (the
# encoder's Normalize skipped); "normalised" L2-normalises both vectors first (MiniLM's pipeline as it comes).
SETTINGS = {
    "CONC(s+c)": ("conc_sc", False, False),
    "CONC(c+s)": ("conc_cs", False, False),
    "CONC(s+c) - c (raw)": ("conc_sc", True, False),
    "CONC(c+s) - c (raw)": ("conc_cs", True, False),
    "CONC(s+c) - c (normalised)": ("conc_sc", True, True),
    "CONC(c+s) - c (normalised)": ("conc_cs", True, True),
}


def _encoder(model: Any, label: str, cache_dir: Path, name: str, **kwargs: Any) -> ConditionAwareEncoder:
    formulation, subtract, normalize = SETTINGS[label]
    return ConditionAwareEncoder(
        model,
        PromptFormat("mlm", formulation),
        subtract_condition=subtract,
        normalize_before_subtract=normalize,
        cache_dir=cache_dir,
        model_name=name,
        **kwargs,
    )


def embed_all(model: Any, splits: dict, cache_dir: Path, name: str) -> tuple[dict, dict]:
    """Embed every split once per formulation (cold cache), then build every setting from the cache."""
    embeddings: dict[str, dict[str, Any]] = {}
    timing = {}
    for formulation in ("conc_sc", "conc_cs"):
        labels = [k for k, v in SETTINGS.items() if v[0] == formulation]
        cold = _encoder(model, labels[-1], cache_dir, name, batch_size=64, show_progress=True)
        start = time.perf_counter()
        for ds in splits.values():
            embed_pairs(cold, ds)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        for label in labels:
            reuse = _encoder(model, label, cache_dir, name)
            embeddings[label] = {split: embed_pairs(reuse, ds) for split, ds in splits.items()}
            assert reuse.encoded == 0, "cache reuse re-encoded texts"
        timing[formulation] = {
            "texts_encoded_cold": cold.encoded,
            "embed_seconds_cold": round(seconds, 2),
            "reload_from_cache_seconds_all_variants": round(time.perf_counter() - start, 2),
            "variants": labels,
            "texts_encoded_on_reuse": 0,
        }
    return embeddings, timing


def truncated_data_root(root: Path, folder: Path, limit: int) -> Path:
    """A data root whose csts/train.csv and csts/validation.csv hold the first ``limit`` records (smoke tests)."""
    (folder / "csts").mkdir(parents=True)
    for name in ("train.csv", "validation.csv"):
        with (root / "csts" / name).open(newline="", encoding="utf-8") as src:
            rows = list(csv.reader(src))[: limit + 1]
        with (folder / "csts" / name).open("w", newline="", encoding="utf-8") as dst:
            csv.writer(dst).writerows(rows)
    return folder


def cli_end_to_end(args: argparse.Namespace, best: dict, root: Path, cache_dir: Path) -> dict:
    """Train the dev-selected setting with `finesim case train`, then score it with `finesim evaluate`."""
    from finesim.cli.main import main as finesim

    formulation, subtract, normalize = SETTINGS[best["setting"]]
    with tempfile.TemporaryDirectory(prefix="case-cli-") as work:
        data = truncated_data_root(root, Path(work) / "data", args.limit) if args.limit else root
        folder = Path(work) / "model"
        options = {
            "--model": args.model,
            "--formulation": formulation,
            "--kind": best["kind"],
            "--dim": best["dim"],
            "--epochs": args.epochs,
            "--seed": args.seed,
            "--dev-fraction": args.dev_fraction,
            "--threads": args.train_threads,
            "--cache-dir": cache_dir,
            "--data": data,
            "--eval": data / "csts" / "validation.csv",
            "--output-dir": folder,
        }
        train_argv = ["case", "train", "--no-progress"]
        train_argv.append("--subtract-condition" if subtract else "--no-subtract-condition")
        train_argv.append("--normalize-before-subtract" if normalize else "--no-normalize-before-subtract")
        for flag, value in options.items():
            train_argv += [flag, str(value)]
        if finesim(train_argv) != 0:
            raise SystemExit("finesim case train failed")
        training = json.loads((folder / "training.json").read_text(encoding="utf-8"))
        eval_argv = ["evaluate", "--model", str(folder), "--tasks", "CSTS-validation", "--data", str(data)]
        eval_argv += ["--output", str(Path(work) / "eval.json"), "--no-progress"]
        previous = os.environ.get("FINESIM_CASE_CACHE")
        os.environ["FINESIM_CASE_CACHE"] = str(cache_dir)
        try:
            if finesim(eval_argv) != 0:
                raise SystemExit("finesim evaluate failed")
        finally:
            if previous is None:
                os.environ.pop("FINESIM_CASE_CACHE")
            else:
                os.environ["FINESIM_CASE_CACHE"] = previous
        evaluated = json.loads((Path(work) / "eval.json").read_text(encoding="utf-8"))
    placeholders = {work: "<tmp>", str(cache_dir): "<cache>", str(root): "<data>"}

    def shown(argv: list[str]) -> list[str]:
        for old, new in placeholders.items():
            argv = [a.replace(old, new) for a in argv]
        return ["finesim", *argv]

    return {
        "setting": best["setting"],
        "train_command": shown(train_argv),
        "evaluate_command": ["FINESIM_CASE_CACHE=<cache>", *shown(eval_argv)],
        "limit": args.limit,
        "texts_encoded_by_train": training["texts_encoded"],
        "train_seconds": training["training"]["train_seconds"],
        "best_epoch": training["training"]["best_epoch"],
        "best_dev_spearman": training["training"]["best_dev_spearman"],
        "train_validation_spearman": training["eval_spearman"]["validation"],
        "evaluate_validation_spearman": evaluated["results"]["CSTS-validation"]["main_score"],
        "texts_encoded_by_evaluate": evaluated["timing"]["texts_encoded"],
        "evaluate_seconds": evaluated["timing"]["evaluation_seconds"],
    }


def thread_probe(model: Any, texts: list[str], width: int, steps: int = 20) -> dict:
    """Encoding rate and projection step time with 1 and with 2 torch threads (no cache involved)."""
    previous = torch.get_num_threads()
    model.encode(texts[:16], batch_size=16)  # warm-up
    rng = np.random.default_rng(0)
    pairs = PairEmbeddings(
        rng.standard_normal((512 * steps, width)), rng.standard_normal((512 * steps, width)), np.ones(512 * steps)
    )
    rows = {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            start = time.perf_counter()
            model.encode(texts, batch_size=64)
            encode_seconds = time.perf_counter() - start
            config = TrainConfig(kind="nonlinear", dim=width, batch_size=512, epochs=1, threads=threads)
            trained = train_projection(pairs, None, config, show_progress=False)
            rows[f"threads_{threads}"] = {
                "encode_texts_per_second": round(len(texts) / encode_seconds, 1),
                "projection_step_seconds": round(trained.train_seconds / steps, 4),
            }
    finally:
        torch.set_num_threads(previous)
    return {
        "texts": len(texts),
        "projection": f"non-linear {width}->{width}, batch 512, {steps} steps of train_projection",
        "cpu_count": os.cpu_count(),
        "note": "wall-clock on a machine shared with other jobs: depends on their load at the time",
        **rows,
    }


def bi_encoder_comparison(path: Path, run_name: str, model: Any, model_name: str, train_info: dict, case: dict) -> dict:
    """The fine-tuned bi-encoder (read from its results file) next to the dev-selected CASE projection."""
    record = json.loads(path.read_text(encoding="utf-8"))
    run = record["runs"][run_name]
    recipe = run["recipe"]
    evaluations = run["evaluations"]
    best = max(evaluations, key=lambda e: e["spearman"])
    same_backbone = recipe["model"]["backbone"] == model_name and recipe["model"].get("head") is None
    params = sum(p.numel() for p in model.parameters() if p.requires_grad) if same_backbone else None
    same_train = record["data"]["train_sha256"] == train_info["sha256"]
    all_rows = same_train and recipe["data"].get("max_train_rows") is None
    bi = {
        "validation_spearman": run["validation_spearman"],
        "evaluations": evaluations,
        "best_epoch": best["epoch"],
        "last_epoch": evaluations[-1]["epoch"],
        "trainable_parameters": params,
        "trainable_parameters_source": (
            f"counted here: every parameter of {model_name} (a bi-encoder without a head trains all of them)"
            if same_backbone
            else "not counted: the run's backbone or head differs from this benchmark's model"
        ),
        "train_rows": train_info["rows_full_file"] if all_rows else None,
        "step_seconds": run["step_seconds"],
        "wall_seconds": run["wall_seconds"],
        "threads": recipe["train"]["num_threads"],
        "labels": recipe["labels"],
        "epochs": recipe["train"]["epochs"],
    }
    embed_total = case["embed_seconds_all_formulations"]
    caveats = [
        f"training rows: the bi-encoder trained on all {bi['train_rows']} rows of train.csv; CASE on "
        f"{case['train_pairs']} (train.csv minus the dev carve{', cut by --limit' if case['limit'] else ''})"
        if all_rows
        else "training rows: the bi-encoder's training file or row cap differs from this benchmark's train.csv",
        f"selection: the bi-encoder kept its best epoch by validation Spearman (the reporting split); best epoch "
        f"{bi['best_epoch']:g} of {bi['last_epoch']:g}"
        + (", the last, so its number equals the last epoch's" if bi["best_epoch"] == bi["last_epoch"] else "")
        + "; CASE selects on the dev carve only",
        f"threads: bi-encoder {bi['threads']}, CASE projection {case['train_threads']}; measured at different "
        "times on a shared machine",
        f"label scaling: bi-encoder {bi['labels'].get('scale')} over [{bi['labels'].get('low')}, "
        f"{bi['labels'].get('high')}], CASE label/5 (the reference)",
    ]
    if record["data"]["validation_sha256"] != train_info["validation_sha256"]:
        caveats.append("validation file: the two runs used different validation.csv contents")
    return {
        "source": str(path),
        "source_sha256": file_sha256(path),
        "run": run_name,
        "bi_encoder": bi,
        "case": case,
        "validation_spearman_gap": bi["validation_spearman"] - case["validation_spearman"],
        "training_seconds_ratio": bi["step_seconds"] / case["train_seconds"],
        "training_seconds_ratio_counting_embedding": bi["step_seconds"] / (case["train_seconds"] + embed_total),
        "caveats": caveats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--data", default=None, help="data root (default: finesim's)")
    parser.add_argument("--cache-dir", default=None, help="embedding cache (default: fresh temp folder)")
    parser.add_argument("--out", default="benchmarks/results/case_minilm.json")
    parser.add_argument("--dev-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--dims", default="32,64,128,256,full,512", help="sweep sizes; full = the model width")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--limit", type=int, default=None, help="smoke test: first N rows of each split")
    parser.add_argument("--settings", default=None, help="comma-separated subset of the settings (default all)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the no-CASE reference scores")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for encoding (docs/case.md)")
    parser.add_argument("--train-threads", type=int, default=1, help="torch threads for projection training")
    parser.add_argument(
        "--bi-encoder-results",
        default="benchmarks/results/csts_train_3ep.json",
        help="results file of the fine-tuned bi-encoder (benchmarks/csts_train.py) to compare against",
    )
    parser.add_argument("--bi-encoder-run", default="bi-mse", help="run name inside --bi-encoder-results")
    parser.add_argument("--no-cli-check", action="store_true", help="skip the end-to-end CLI run")
    parser.add_argument("--probe-texts", type=int, default=256, help="texts for the thread probe (0 = skip)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    bi_results = Path(args.bi_encoder_results)
    if not bi_results.is_file():
        raise SystemExit(f"--bi-encoder-results {bi_results} not found")
    root = Path(args.data) if args.data else data_root()
    train_file, val_file = root / "csts" / "train.csv", root / "csts" / "validation.csv"
    full_train, train_report = read_csts(train_file)
    validation, val_report = read_csts(val_file)
    train, dev = split_by_pair(full_train, args.dev_fraction, args.seed)
    if args.limit:
        train, dev, validation = (d.select(range(min(args.limit, len(d)))) for d in (train, dev, validation))
    splits = {"train": train, "dev": dev, "validation": validation}
    result: dict = {
        "benchmark": "case",
        "environment": environment_record(),
        "model": args.model,
        "limit": args.limit,
        "settings": {
            k: dict(zip(("formulation", "subtract_condition", "normalize_before_subtract"), v))
            for k, v in SETTINGS.items()
        },
        "data": {
            "train": split_summary("train", train, str(train_file), sha256=file_sha256(train_file)),
            "dev": split_summary(
                "dev", dev, str(train_file), carve=f"{args.dev_fraction} of sentence pairs, seed {args.seed}"
            ),
            "validation": split_summary(
                "validation",
                validation,
                str(val_file),
                sha256=file_sha256(val_file),
                report=val_report.__dict__,
            ),
            "train_load_report": train_report.__dict__,
            "selection_split": "dev",
            "reporting_split": "validation",
        },
    }
    tmp = tempfile.TemporaryDirectory(prefix="case-cache-")
    cache_dir = Path(args.cache_dir) if args.cache_dir else Path(tmp.name)
    model = load_sentence_model(args.model)
    width = model.get_embedding_dimension()

    # Reference points: the same encoder without CASE (sentence alone; C-STS text-pair bi-encoder input).
    baselines = {}
    for mode in () if args.no_baselines else ("ignore", "pair"):
        scorer = EmbeddingScorer(model, condition_mode=mode, batch_size=64)
        row = {}
        for name in ("dev", "validation"):
            ds = splits[name]
            pred = scorer.score(ds["sentence1"], ds["sentence2"], ds["condition"])
            row[f"{name}_spearman"] = spearman(pred, ds["label"])
        baselines[f"no CASE, condition_mode={mode}"] = row
    result["baselines_zero_shot"] = baselines or "skipped (--no-baselines)"

    # Step 1: embed every split once per formulation (cold cache); every setting then comes from the cache.
    embeddings, timing = embed_all(model, splits, cache_dir, args.model)
    result["embedding_timing"] = timing

    # Unsupervised Table 1 settings.
    result["unsupervised"] = {
        label: {f"{n}_spearman": evaluate_pairs(None, data[n]) for n in ("dev", "validation")}
        for label, data in embeddings.items()
    }

    # Isotropy on the validation embeddings (both sentences of every row).
    iso = {}
    for formulation in ("conc_sc", "conc_cs"):
        dists = {}
        for label in (k for k, v in SETTINGS.items() if v[0] == formulation):
            data = embeddings[label]["validation"]
            both = np.concatenate([data.x1, data.x2])
            iso[label] = isotropy_summary(both, num_directions=1000, seed=0)
            dists[label] = cosine_to_mean(both)
        png = out.with_name(f"{out.stem}_isotropy_{formulation}.png")
        save_histograms(dists, png, title=f"{Path(args.model).name}: embedding-to-mean cosine (validation)")
        iso[f"histogram_{formulation}"] = str(png)
    result["isotropy"] = iso

    # Step 2: supervised projections (model width and k=512), every setting, both kinds.
    supervised = []
    chosen = [x.strip() for x in args.settings.split(",")] if args.settings else list(SETTINGS)
    unknown = sorted(set(chosen) - set(SETTINGS))
    if unknown:
        raise SystemExit(f"unknown settings {unknown}; choose from {list(SETTINGS)}")
    for label in chosen:
        data = embeddings[label]
        for kind in ("linear", "nonlinear"):
            for dim in sorted({width, 512}):
                config = TrainConfig(kind=kind, dim=dim, epochs=args.epochs, seed=args.seed, threads=args.train_threads)
                trained = train_projection(data["train"], data["dev"], config, show_progress=False)
                row = {
                    "setting": label,
                    "kind": kind,
                    "dim": dim,
                    "trainable_parameters": trained.projection.num_parameters(),
                    "best_epoch": trained.best_epoch,
                    "dev_spearman": trained.best_dev_spearman,
                    "validation_spearman": evaluate_pairs(trained.projection, data["validation"]),
                    "train_seconds": round(trained.train_seconds, 2),
                    "train_pairs": len(data["train"]),
                    "epochs": args.epochs,
                    "train_threads": args.train_threads,
                }
                logging.info("supervised %s", row)
                supervised.append(row)
    result["supervised"] = supervised
    best = max(supervised, key=lambda r: r["dev_spearman"])
    result["selected_on_dev"] = best

    # Dimension sweep of the dev-selected setting and kind.
    data = embeddings[best["setting"]]
    result["dimension_sweep"] = {
        "setting": best["setting"],
        "kind": best["kind"],
        "rows": sweep_dimensions(
            data["train"],
            data["dev"],
            parse_dims(args.dims, width),
            TrainConfig(kind=best["kind"], epochs=args.epochs, seed=args.seed, threads=args.train_threads),
            report={"validation": data["validation"]},
        ),
    }

    # Save / reload round trip of the selected model through the PairScorer interface.
    config = TrainConfig(
        kind=best["kind"], dim=best["dim"], epochs=args.epochs, seed=args.seed, threads=args.train_threads
    )
    trained = train_projection(data["train"], data["dev"], config, show_progress=False)
    case = CaseModel(_encoder(model, best["setting"], cache_dir, args.model), trained.projection)
    with tempfile.TemporaryDirectory() as folder:
        case.save(folder)
        reloaded = CaseModel.load(folder, cache_dir=cache_dir)
        v = validation
        start = time.perf_counter()
        scores = reloaded.score(v["sentence1"], v["sentence2"], v["condition"])
        seconds = time.perf_counter() - start
        result["reload_check"] = {
            "validation_spearman": spearman(scores, v["label"]),
            "max_abs_diff_vs_in_memory": float(
                np.abs(scores - case.score(v["sentence1"], v["sentence2"], v["condition"])).max()
            ),
            "texts_encoded_by_reloaded_model": reloaded.encoder.encoded,
            "score_seconds_cached": round(seconds, 3),
        }

    # The same setting end to end through the command line, on the same cache.
    if args.no_cli_check:
        result["cli_end_to_end"] = "skipped (--no-cli-check)"
    else:
        result["cli_end_to_end"] = cli_end_to_end(args, best, root, cache_dir)

    if args.probe_texts:
        texts = list(dict.fromkeys([*validation["sentence1"], *validation["sentence2"]]))[: args.probe_texts]
        result["thread_probe"] = thread_probe(model, texts, width)

    # Against the fine-tuned bi-encoder, read from its results file.
    result["comparison_with_fine_tuned_bi_encoder"] = bi_encoder_comparison(
        bi_results,
        args.bi_encoder_run,
        model,
        args.model,
        {
            "sha256": result["data"]["train"]["sha256"],
            "validation_sha256": result["data"]["validation"]["sha256"],
            "rows_full_file": len(full_train),
        },
        {
            **{k: best[k] for k in ("setting", "kind", "dim", "trainable_parameters", "dev_spearman")},
            **{k: best[k] for k in ("validation_spearman", "train_seconds", "train_pairs", "train_threads")},
            "selected_on": "dev",
            "limit": args.limit,
            "embed_seconds_all_formulations": round(sum(t["embed_seconds_cold"] for t in timing.values()), 2),
            "embed_threads": args.threads,
        },
    )
    write_json_atomic(out, portable(result, path_roots(root)))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
