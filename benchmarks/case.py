"""Benchmark CASE with a plain (MLM-style) sentence encoder on the re-annotated C-STS.

Splits: model selection (best epoch, best setting) on a development split carved from train.csv (10% of the
sentence pairs, both conditions of a pair together, seed 42); numbers are reported on validation.csv
(labelled rows only). The paper's validation[1983:] test split is not reproducible here (the rest of the
validation file is not distributed).

Measures: the unsupervised settings of the paper's Table 1 for an MLM encoder (CONC(s+c), CONC(c+s), each
with and without "− c"), the supervised projection (linear vs non-linear at the model width and at k=512),
a dimension sweep, isotropy (I_iso, embedding-to-mean cosines, PNG histograms), wall times (cold embedding,
cache reuse, training), trainable parameters, and a save/reload round trip of the best model.

Run under the CPU lock:
    flock /tmp/finesim-cpu.lock nohup python benchmarks/case.py > /tmp/case-bench.log 2>&1 &
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from finesim.case import (
    CaseModel,
    ConditionAwareEncoder,
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
from finesim.data import read_csts
from finesim.evaluation.metrics import spearman
from finesim.evaluation.scoring import EmbeddingScorer
from finesim.models import load_sentence_model
from finesim.paths import data_root
from finesim.results import environment_record, file_sha256, write_json_atomic

SETTINGS = {
    "CONC(s+c)": ("conc_sc", False),
    "CONC(c+s)": ("conc_cs", False),
    "CONC(s+c) - c": ("conc_sc", True),
    "CONC(c+s) - c": ("conc_cs", True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--data", default=None, help="data root (default: finesim's)")
    parser.add_argument("--cache-dir", default=None, help="embedding cache (default: fresh temp folder)")
    parser.add_argument("--out", default="benchmarks/results/case_minilm.json")
    parser.add_argument("--dev-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--dims", default="32,64,128,256,384,512")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--limit", type=int, default=None, help="smoke test: first N rows of each split")
    parser.add_argument("--settings", default=None, help="comma-separated subset of the settings (default all)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the no-CASE reference scores")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for encoding (docs/case.md)")
    parser.add_argument("--train-threads", type=int, default=1, help="torch threads for projection training")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
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

    # Step 1: embed every split once per formulation (cold cache), then again to prove reuse.
    embeddings: dict[str, dict[str, object]] = {}
    timing = {}
    for formulation in ("conc_sc", "conc_cs"):
        encoder = ConditionAwareEncoder(
            model,
            PromptFormat("mlm", formulation),
            subtract_condition=True,
            cache_dir=cache_dir,
            model_name=args.model,
            batch_size=64,
            show_progress=True,
        )
        start = time.perf_counter()
        for ds in splits.values():
            embed_pairs(encoder, ds)
        cold = time.perf_counter() - start
        encoded_cold = encoder.encoded
        start = time.perf_counter()
        for subtract in (False, True):
            reuse = ConditionAwareEncoder(
                model,
                PromptFormat("mlm", formulation),
                subtract_condition=subtract,
                cache_dir=cache_dir,
                model_name=args.model,
            )
            for name, ds in splits.items():
                embeddings.setdefault(f"{formulation}/{subtract}", {})[name] = embed_pairs(reuse, ds)
            assert reuse.encoded == 0, "cache reuse re-encoded texts"
        timing[formulation] = {
            "texts_encoded_cold": encoded_cold,
            "embed_seconds_cold": round(cold, 2),
            "reload_from_cache_seconds_both_variants": round(time.perf_counter() - start, 2),
            "texts_encoded_on_reuse": 0,
        }
    result["embedding_timing"] = timing

    # Unsupervised Table 1 settings.
    table1 = {}
    for label, (formulation, subtract) in SETTINGS.items():
        data = embeddings[f"{formulation}/{subtract}"]
        table1[label] = {f"{n}_spearman": evaluate_pairs(None, data[n]) for n in ("dev", "validation")}
    result["unsupervised"] = table1

    # Isotropy on the validation embeddings (both sentences of every row).
    iso = {}
    for formulation in ("conc_sc", "conc_cs"):
        dists = {}
        for subtract in (False, True):
            label = next(k for k, v in SETTINGS.items() if v == (formulation, subtract))
            data = embeddings[f"{formulation}/{subtract}"]["validation"]
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
    for label, (formulation, subtract) in ((k, SETTINGS[k]) for k in chosen):
        data = embeddings[f"{formulation}/{subtract}"]
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
    formulation, subtract = SETTINGS[best["setting"]]
    data = embeddings[f"{formulation}/{subtract}"]
    dims = [int(d) for d in args.dims.split(",")]
    result["dimension_sweep"] = {
        "setting": best["setting"],
        "kind": best["kind"],
        "rows": sweep_dimensions(
            data["train"],
            data["dev"],
            dims,
            TrainConfig(kind=best["kind"], epochs=args.epochs, seed=args.seed, threads=args.train_threads),
            report={"validation": data["validation"]},
        ),
    }

    # Save / reload round trip of the selected model through the PairScorer interface.
    config = TrainConfig(
        kind=best["kind"], dim=best["dim"], epochs=args.epochs, seed=args.seed, threads=args.train_threads
    )
    trained = train_projection(data["train"], data["dev"], config, show_progress=False)
    encoder = ConditionAwareEncoder(
        model,
        PromptFormat("mlm", formulation),
        subtract_condition=subtract,
        cache_dir=cache_dir,
        model_name=args.model,
    )
    case = CaseModel(encoder, trained.projection, {"training": trained.summary()})
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
    write_json_atomic(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
