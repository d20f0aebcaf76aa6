"""Triples for distilling a conditional teacher into an index-once student (docs/search.md, "A distilled first
stage").

A bi-encoder scores ``cos(f(s1, c), f(s2, c))`` with the condition inside the encoder, so a corpus must be embedded
once per condition; a tri-encoder embeds each text once and applies the condition after pooling. To make the
tri-encoder rank as the bi-encoder does, it is trained on the teacher's scores of many ``(sentence, sentence,
condition)`` triples. :func:`build_distillation_triples` makes those triples from a C-STS training table:

- ``own``: every training pair under its own condition (the C-STS rows themselves, duplicates dropped);
- ``other-condition``: the same pairs under conditions drawn from other rows (never one of the pair's own), spread
  evenly over the pairs (each pair gets ``n // pairs`` or one more, fewer only where a pair has run out of
  conditions);
- ``new-pair``: ``new_pair_fraction`` of ``size``: pairs of training sentences that are no training pair, each
  under one condition drawn from the training rows'.

``size`` counts all three; the own rows come first (all of them unless ``size`` leaves less room, then a seeded
sample), the other-condition triples fill the rest. A triple is a duplicate of another when its condition and its
two sentences (in either order: the teacher's cosine is symmetric) are the same; none is written twice. The output
order is a seeded shuffle, so any prefix of the file has the same mix. Everything is drawn from NumPy generators
seeded by ``seed``: the same table, size, fraction and seed give the same file.

The development split (``dev_fraction``) is :func:`finesim.data.splits.split_by_pair` on the table (whole sentence
pairs, ``dev_seed``): the rows a training recipe with ``data.dev_fraction`` / ``data.dev_seed`` would carve, so a
teacher trained with the same two values never saw the dev rows. No triple holds a dev sentence: the training pairs
that share a sentence with a dev pair are dropped (counted in the report), and the sentences and conditions that
other-condition and new-pair triples are drawn from come from the remaining rows only; a final check refuses any
leak. The dev rows keep their human labels and are written as a C-STS CSV, the student's validation data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset

KINDS = ("own", "other-condition", "new-pair")
"""The kinds of triple, in the ``kind`` column (see the module docstring)."""
TRIPLE_COLUMNS = ("sentence1", "sentence2", "condition", "kind")
DEFAULT_NEW_PAIR_FRACTION = 0.2
DEFAULT_SIZE = 200_000

Progress = Callable[[int], None]


@dataclass
class DistillationTriples:
    """What :func:`build_distillation_triples` returns.

    Attributes:
        triples: columns ``sentence1``, ``sentence2``, ``condition``, ``kind`` (one of :data:`KINDS`), seeded order.
        dev: the dev rows (``sentence1``, ``sentence2``, ``condition``, ``label``, ``row``) with their human labels,
            or None without a dev split.
        report: counts and settings (see :func:`build_distillation_triples`).
    """

    triples: Dataset
    dev: Dataset | None
    report: dict[str, Any] = field(default_factory=dict)


def _pair_key(s1: str, s2: str) -> tuple[str, str]:
    return (s1, s2) if s1 <= s2 else (s2, s1)


def _largest_size(limit: int, new_pair_fraction: float) -> int:
    """The largest size whose triples of training pairs (all but ``round(new_pair_fraction * size)``, the new pairs)
    fit in ``limit`` (the training rows plus the pairs' other conditions): the new pairs grow with the size."""
    most = int((limit + 1) / max(1.0 - new_pair_fraction, 1e-9)) + 2  # beyond it, no size fits (rounding aside)
    while most > 0 and most - round(new_pair_fraction * most) > limit:
        most -= 1
    return most


def build_distillation_triples(
    train: Dataset,
    *,
    size: int = DEFAULT_SIZE,
    seed: int = 42,
    new_pair_fraction: float = DEFAULT_NEW_PAIR_FRACTION,
    dev_fraction: float | None = 0.1,
    dev_seed: int = 42,
    progress: Progress | None = None,
) -> DistillationTriples:
    """Build ``size`` distinct distillation triples from C-STS training rows; see the module docstring for the mix.

    Args:
        train: rows with ``sentence1``, ``sentence2``, ``condition`` (and ``label``, kept for the dev rows), e.g.
            from :func:`finesim.data.csts.read_csts`.
        size: triples in all (own + other-condition + new-pair).
        seed: the seed of every draw (NumPy ``default_rng`` streams spawned from it).
        new_pair_fraction: share of ``size`` made of new sentence pairs, in [0, 1).
        dev_fraction: share of sentence pairs carved off as dev (:func:`~finesim.data.splits.split_by_pair`); None:
            no dev split.
        dev_seed: the seed of the dev split (use the teacher recipe's ``data.dev_seed``).
        progress: called with the number of triples added at each step (a progress bar's ``update``).

    Returns:
        The triples, the dev rows and a report: the settings, the dev split's pairs, rows and sentences, the training
        rows and pairs dropped for sharing a sentence with dev, duplicate rows dropped, the pools of sentences,
        conditions and pairs drawn from, and the count of each kind.

    Raises:
        ValueError: a bad argument, missing columns, or a ``size`` / fraction the table cannot fill without
            duplicates (the message gives the most it can).
    """
    missing = [c for c in ("sentence1", "sentence2", "condition") if c not in train.column_names]
    if missing:
        raise ValueError(f"the training rows have no {missing} column(s); they have {train.column_names}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    if not 0.0 <= new_pair_fraction < 1.0:
        raise ValueError(f"new_pair_fraction must be in [0, 1), got {new_pair_fraction}")
    update = progress or (lambda n: None)
    own_rng, other_rng, new_rng, order_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))

    dev = None
    dev_sentences: set[str] = set()
    rows = train
    report: dict[str, Any] = {
        "seed": seed,
        "size": size,
        "new_pair_fraction": new_pair_fraction,
        "rows_in": len(train),
        "dev": None,
    }
    if dev_fraction is not None:
        from finesim.data.splits import split_by_pair

        rows, dev = split_by_pair(train, dev_fraction, dev_seed)
        dev_sentences = set(dev["sentence1"]) | set(dev["sentence2"])
        report["dev"] = {
            "fraction": dev_fraction,
            "seed": dev_seed,
            "pairs": len(set(zip(dev["sentence1"], dev["sentence2"]))),
            "rows": len(dev),
            "sentences": len(dev_sentences),
        }

    # the training rows that remain: none shares a sentence with a dev pair, no triple twice
    own: list[tuple[str, str, str]] = []
    seen: set[tuple[tuple[str, str], str]] = set()
    pairs: dict[tuple[str, str], tuple[str, str, set[str]]] = {}  # key -> (s1, s2 as first read, own conditions)
    leaked_rows, leaked_pairs, duplicates = 0, set(), 0
    for s1, s2, c in zip(rows["sentence1"], rows["sentence2"], rows["condition"]):
        key = _pair_key(s1, s2)
        if s1 in dev_sentences or s2 in dev_sentences:
            leaked_rows += 1
            leaked_pairs.add(key)
            continue
        if (key, c) in seen:
            duplicates += 1
            continue
        seen.add((key, c))
        own.append((s1, s2, c))
        pairs.setdefault(key, (s1, s2, set()))[2].add(c)
    report["dropped"] = {
        "rows_sharing_a_dev_sentence": leaked_rows,
        "pairs_sharing_a_dev_sentence": len(leaked_pairs),
        "duplicate_rows": duplicates,
    }
    if not own:
        raise ValueError("no training rows remain after the dev split; lower dev_fraction")
    conditions = sorted({c for _, _, c in own})
    sentences = sorted({s for s1, s2, _ in own for s in (s1, s2)})
    pair_keys = list(pairs)  # in table order
    report["pools"] = {"sentences": len(sentences), "conditions": len(conditions), "pairs": len(pair_keys)}
    report["own_available"] = len(own)

    n_new = round(new_pair_fraction * size)
    n_own = min(len(own), size - n_new)
    n_other = size - n_new - n_own
    if n_own < len(own):
        keep = np.sort(own_rng.choice(len(own), size=n_own, replace=False))
        own = [own[i] for i in keep]
    triples: list[tuple[str, str, str, str]] = [(*t, "own") for t in own]
    update(len(triples))

    # other conditions: quotas spread evenly over the pairs (seeded order), capped by what each pair has left
    capacity = np.array([len(conditions) - len(pairs[k][2]) for k in pair_keys], dtype=np.int64)
    if n_other > capacity.sum():
        most = _largest_size(report["own_available"] + int(capacity.sum()), new_pair_fraction)
        raise ValueError(
            f"size {size} needs {n_other} triples of training pairs under other conditions, but the "
            f"{len(pair_keys)} pairs and {len(conditions)} conditions give only {int(capacity.sum())}; size can be at "
            f"most {most} at new_pair_fraction {new_pair_fraction} (or raise new_pair_fraction)"
        )
    quota = np.zeros(len(pair_keys), dtype=np.int64)
    order = other_rng.permutation(len(pair_keys))
    order = order[np.argsort(capacity[order], kind="stable")]  # smallest capacity first, ties in seeded order
    left = n_other
    for i, p in enumerate(order):
        share = -(-left // (len(order) - i))  # the ceiling of an even share of what is left
        quota[p] = min(int(capacity[p]), share)
        left -= int(quota[p])
    index = {c: i for i, c in enumerate(conditions)}
    for p, key in enumerate(pair_keys):
        if not quota[p]:
            continue
        s1, s2, taken = pairs[key]
        drawn = other_rng.choice(len(conditions), size=min(len(conditions), int(quota[p]) + len(taken)), replace=False)
        mine = {index[c] for c in taken}
        chosen = [conditions[i] for i in drawn if i not in mine][: quota[p]]
        triples.extend((s1, s2, c, "other-condition") for c in chosen)
        update(len(chosen))

    # new pairs: two different training sentences that are no training pair, each under one condition
    n_sent = len(sentences)
    new_capacity = n_sent * (n_sent - 1) // 2 - len(pair_keys)
    if n_new > new_capacity:
        raise ValueError(
            f"new_pair_fraction {new_pair_fraction} asks for {n_new} new sentence pairs, but the {n_sent} training "
            f"sentences make only {new_capacity} pairs that are not training pairs; lower new_pair_fraction"
        )
    taken_pairs = set(pair_keys)
    if n_new > new_capacity // 2:  # a dense draw: choose among every candidate
        candidates = [
            (a, b) for i, a in enumerate(sentences) for b in sentences[i + 1 :] if _pair_key(a, b) not in taken_pairs
        ]
        picks = new_rng.choice(len(candidates), size=n_new, replace=False)
        drawn_pairs = [candidates[i] for i in picks]
    else:
        drawn_pairs = []
        while len(drawn_pairs) < n_new:
            ab = new_rng.integers(n_sent, size=(2 * (n_new - len(drawn_pairs)) + 16, 2))
            for a, b in ab:
                if a == b:
                    continue
                key = _pair_key(sentences[a], sentences[b])
                if key in taken_pairs:
                    continue
                taken_pairs.add(key)
                drawn_pairs.append((sentences[a], sentences[b]))
                if len(drawn_pairs) == n_new:
                    break
    picked = new_rng.integers(len(conditions), size=len(drawn_pairs))
    new: list[tuple[str, str, str, str]] = [(a, b, conditions[c], "new-pair") for (a, b), c in zip(drawn_pairs, picked)]
    triples.extend(new)
    update(len(new))

    _check(triples, dev_sentences, size)
    order = order_rng.permutation(len(triples))
    columns = {name: [triples[i][j] for i in order] for j, name in enumerate(TRIPLE_COLUMNS)}
    report["counts"] = {
        "own": n_own,
        "other-condition": n_other,
        "new-pair": n_new,
        "total": len(triples),
    }
    return DistillationTriples(Dataset.from_dict(columns), dev, report)


def _check(triples: list[tuple[str, str, str, str]], dev_sentences: set[str], size: int) -> None:
    """The promises of the module docstring, checked on the result: the size, no duplicate, no dev sentence."""
    if len(triples) != size:
        raise AssertionError(f"built {len(triples)} triples, not {size}")
    keys = {(_pair_key(s1, s2), c) for s1, s2, c, _ in triples}
    if len(keys) != len(triples):
        raise AssertionError(f"{len(triples) - len(keys)} duplicate triples")
    leak = next((s for t in triples for s in t[:2] if s in dev_sentences), None)
    if leak is not None:
        raise AssertionError(f"a triple holds the dev sentence {leak!r}")


def write_distillation_files(
    train_path: str | Path,
    out: str | Path,
    *,
    dev_out: str | Path | None,
    size: int = DEFAULT_SIZE,
    seed: int = 42,
    new_pair_fraction: float = DEFAULT_NEW_PAIR_FRACTION,
    dev_fraction: float | None = 0.1,
    dev_seed: int = 42,
    show_progress: bool = False,
    batch_rows: int = 10_000,
) -> dict[str, Any]:
    """Read a C-STS training CSV, build the triples (:func:`build_distillation_triples`) and write them to ``out``
    (CSV, TSV, JSONL or Parquet by extension) and the dev rows to ``dev_out`` (a C-STS CSV: ``sentence1``,
    ``sentence2``, ``condition``, ``label``), both atomically; returns the report with the input file's path,
    SHA-256 and load report added.

    Raises:
        DataFormatError: the training file (a missing column, a bad label: file, row and column named).
        ValueError: the settings (see :func:`build_distillation_triples`); ``dev_out`` missing with a dev split,
            given without one, or not a ``.csv`` file.
    """
    from tqdm.auto import tqdm

    from finesim.data.csts import CSTS_COLUMNS, read_csts
    from finesim.data.writers import TableWriter
    from finesim.results import file_sha256

    if (dev_fraction is None) != (dev_out is None):
        raise ValueError(
            "a dev split needs a file to write it to (dev_out)"
            if dev_out is None
            else "dev_out given without a dev split"
        )
    if dev_out is not None and Path(dev_out).suffix.lower() != ".csv":
        raise ValueError(f"the dev rows are written as a C-STS CSV: {dev_out} must end in .csv")
    if dev_out is not None and Path(dev_out).resolve() == Path(out).resolve():
        raise ValueError(f"the triples and the dev rows would both be written to {out}")
    rows, load = read_csts(train_path)
    with tqdm(desc="triples", unit=" triples", total=size, disable=not show_progress) as bar:
        built = build_distillation_triples(
            rows,
            size=size,
            seed=seed,
            new_pair_fraction=new_pair_fraction,
            dev_fraction=dev_fraction,
            dev_seed=dev_seed,
            progress=bar.update,
        )
    with TableWriter(out, TRIPLE_COLUMNS) as writer:
        data = built.triples
        for start in range(0, len(data), batch_rows):
            writer.write(data.select(range(start, min(start + batch_rows, len(data)))).to_list())
    if built.dev is not None and dev_out is not None:
        with TableWriter(dev_out, CSTS_COLUMNS, "csv") as writer:
            writer.write(built.dev.select_columns(list(CSTS_COLUMNS)).to_list())
    return {
        "train": str(train_path),
        "train_sha256": file_sha256(train_path),
        "train_load": load.as_dict(),
        **built.report,
        "out": str(out),
        "dev_out": None if dev_out is None else str(dev_out),
    }


__all__ = [
    "DEFAULT_NEW_PAIR_FRACTION",
    "DEFAULT_SIZE",
    "KINDS",
    "TRIPLE_COLUMNS",
    "DistillationTriples",
    "build_distillation_triples",
    "write_distillation_files",
]
