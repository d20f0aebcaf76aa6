"""``ConditionalIndex``: index a corpus once, then ask "which texts are similar to X with respect to C?".

A result's score is what ``ConditionalScorer(model).similarity(query, text, condition)`` gives (up to float32
rounding): the cosine of the fused embeddings for a tri-encoder, of the (text, condition) embeddings for a
bi-encoder, of the CASE embeddings for a CASE model. ``approximate=`` uses faiss (:mod:`finesim.index.approximate`).
The folder layout is described in :mod:`finesim.index.store`.

Cost model: a tri-encoder embeds the corpus once at build time and fuses the condition at query time
(:mod:`finesim.index.tri`); a bi-encoder or CASE model searched exactly embeds the whole corpus once per condition
(on the condition's first query, or at build time for ``conditions=``; kept on disk), and with a first stage
(:mod:`finesim.index.two_stage`, the default for bi-encoders) a condition it has not stored is answered by
re-ranking the first stage's candidates instead: the nearest texts of a condition-independent embedding, or a
tri-encoder's own top N under the condition (the same ranking code a tri-encoder index searches with).

Without a condition (``search(query, None)``) the corpus is ranked by the cosine of the model's embeddings of the
texts alone, read from what the index already stores: a bi-encoder's ``"self"`` first-stage vectors, a tri-encoder's
stage vectors when its head stores the plain embeddings (:meth:`ConditionalIndex.plain_search_refusal` says why
another index cannot).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import numbers
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from finesim.data.errors import DataFormatError
from finesim.evaluation.fingerprint import (
    describe_inputs_differences,
    inputs_differences,
    model_fingerprint,
    model_inputs_fingerprint,
)
from finesim.index.approximate import ANN_KINDS, AnnFile, ann_params, import_faiss, normalized, recall_at_k
from finesim.index.corpus import meta_rows
from finesim.index.encoders import IndexEncoder, load_index_model
from finesim.index.errors import IndexFormatError, ModelMismatchError
from finesim.index.feedback import LOCAL_MAP_FEEDBACK, LocalMapFeedback, parse_rerank_feedback
from finesim.index.rerank_depth import ADAPTIVE_DEPTH, RerankDepth, parse_rerank_depth
from finesim.index.store import (
    ANN,
    CONDITIONS,
    DTYPES,
    FORMAT,
    FORMAT_VERSION,
    LOCK,
    MANIFEST,
    MAPS,
    PARTS,
    SENTENCES,
    TEMP_PID,
    ArrayWriter,
    IndexStore,
    Part,
    PartWriter,
    duplicate_message,
    find_duplicate,
    lines_sha256,
    new_part_id,
    remove_leftovers,
    utc_now,
    writer_lock,
)
from finesim.index.topk import best_rows
from finesim.index.traffic import SearchTraffic
from finesim.index.tri import HALF_PRODUCT, as_float_tensor, candidate_dot, half_product_bound
from finesim.index.two_stage import (
    BORROWED,
    DEFAULT_CANDIDATES,
    FIRST_STAGE,
    MAP_BORROW_MIN_COSINE,
    MAP_CONDITIONS,
    MAP_FIT_BATCH,
    MAP_FIT_YIELD,
    MAP_PENDING,
    MAP_POOL,
    MAP_RIDGE,
    MAP_SAMPLE,
    MAPPED,
    STRATEGIES,
    TRI,
    ConditionMap,
    FirstStageEncoder,
    FirstStageSpec,
    RerankCache,
    check_map_fit_yield,
    fit_condition_map,
    load_condition_map,
    map_file_name,
    map_sample_rows,
    plain_search_refusal,
    resolve_first_stage,
    save_condition_map,
    takes_feedback,
)

logger = logging.getLogger("finesim.index")

ENCODE_CHUNK = 4096  # texts embedded per step of build / add / a condition's first query
SCORE_CHUNK = 16384  # stored rows scored per step of a search
# an exact search of a float16 index's stored condition takes the top 2 k + HALF_SCAN_MARGIN rows by the half product
# (each product rounded to float16) and returns the k best of them by their float32 scores when no row left out can
# beat them (ConditionalIndex._certified_half_scan); otherwise it scans in float32
HALF_SCAN_MARGIN = 16
MASKS = 32  # filters (``where``) whose row masks a ConditionalIndex keeps


@dataclass
class Batch:
    """Texts in corpus order with their stored arrays: ``sentences`` (tri) and/or one per condition key, and, for an
    index with IDs or metadata, each row's ``{"id": ..., "metadata": {...}}``."""

    texts: list[str]
    arrays: dict[str, np.ndarray]
    meta: list[dict[str, Any]] | None = None


def condition_key(model_sha256: str, encoder: str, condition: str) -> str:
    """The folder name of a condition's embeddings: a hash of the model, the encoder type and the condition."""
    blob = f"{model_sha256}\n{encoder}\n{condition}".encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def check_corpus(texts: Iterable[Any], what: str = "corpus") -> list[str]:
    """The corpus as a list of non-empty strings; an error names the first bad row (0-based) or says it is empty."""
    if isinstance(texts, str):
        raise ValueError(f"the {what} must be a list of texts, got a single string")
    out = list(texts)
    if not out:
        raise ValueError(f"the {what} is empty: nothing to index")
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise ValueError(f"{what} row {i}: {type(text).__name__}, not a string")
        if not text.strip():
            raise ValueError(f"{what} row {i}: empty text")
    return out


def metadata_matches(stored: Any, wanted: Any) -> bool:
    """Whether a row's metadata value equals a filter's value: exactly (a bool only equals a bool), or, for a string
    filter value, the value's JSON spelling (``"2020"`` matches 2020, ``"true"`` matches true: the CLI's values)."""
    if isinstance(wanted, str) and not isinstance(stored, str):
        return stored is not None and json.dumps(stored, ensure_ascii=False) == wanted
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return isinstance(stored, bool) and isinstance(wanted, bool) and stored == wanted
    return bool(stored == wanted)


def _keep(rows: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The candidate ``rows`` a filter's ``mask`` keeps (all without one)."""
    return rows if mask is None else rows[mask[rows]]


def _count(value: Any, problem: str) -> int:
    """``value`` as an int if it is a whole number >= 1 (numpy integers too, not bools), else ValueError(``problem``,
    with the value)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{problem}, got {value!r}")
    return int(value)


def _finite_query(vector: torch.Tensor) -> torch.Tensor:
    """A query embedding, refused when the model gave NaN or infinite values (not the index's fault)."""
    if not bool(torch.isfinite(vector).all()):
        raise ValueError("the model gave a NaN or infinite embedding for the query: check the model")
    return vector


def check_fields(store: IndexStore, given: dict[str, bool]) -> None:
    """An add gives IDs exactly when the index has them, and metadata exactly when it has metadata."""
    has = store.fields
    for name, what, option in (
        ("id", "IDs", "ids= / --id-column"),
        ("metadata", "metadata", "metadata= / --metadata-columns"),
    ):
        if has[name] and not given[name]:
            raise ValueError(
                f"{store.root}: this index has {what} for every row: give them for the added rows ({option})"
            )
        if given[name] and not has[name]:
            raise ValueError(f"{store.root}: this index was built without {what}: add the rows without them")


def check_new_ids(existing: dict[str, int], meta: list[dict[str, Any]], corpus: Sequence[dict[str, Any]]) -> None:
    """No added ID is already in the index (``existing``: ID -> row); the error names the corpus file, row and ID
    column when there is one file."""
    record = corpus[0] if len(corpus) == 1 else {}
    for i, row in enumerate(meta):
        found = existing.get(str(row["id"]))
        if found is None:
            continue
        message = f"ID {row['id']!r} is already in the index (row {found}): IDs are unique across the index"
        if record.get("path") and record.get("id_column"):
            raise DataFormatError(message, path=record["path"], row=i + 1, column=str(record["id_column"]))
        raise ValueError(f"added corpus row {i}: {message}")


NOT_EMBEDDED_RETRIES = 2  # a search's scan met a part committed without its condition: embedded, then again


class NotEmbeddedError(LookupError):
    """A scan met a part without embeddings under its condition: one that an add committed after the condition was
    checked (an add in another process, which chose its conditions before this one was stored)."""


def _text_list(values: Any, what: str) -> list[Any]:
    """``values`` as a list; a lone string (which would be read one character at a time) is refused, naming it."""
    if isinstance(values, str):
        raise ValueError(f"{what} must be a list of strings, got the single string {values!r} (pass [{values!r}])")
    return list(values)


def _whole(value: Any, what: str) -> int:
    """A count such as ``k`` or ``candidates`` as an ``int`` (numpy integers too); anything but a whole number >= 1 is
    refused, naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a whole number >= 1, got {value!r}")
    return int(value)


def _python_value(value: Any) -> Any:
    """A numpy scalar read from a DataFrame as the Python value a filter compares (a float32 by its printed value, so
    2.1 stays 2.1); any other numpy value (a datetime64, ...) is left as it is, and refused as not a plain value."""
    if isinstance(value, (np.integer, np.bool_, np.str_)):
        return value.item()
    if isinstance(value, np.floating):
        return float(str(value))
    return value


def _check_text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"the {what} must be a non-empty string, got {value!r}")
    return value


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="text", disable=not enabled)


def _export_hint(model: Any) -> str:
    """For a model that is a ``finesim export`` (ONNX, or torch quantized): an index is searched with the model it
    was built with, and an export is another (its scores differ a little, or, fp32 ONNX, its weights are another
    file); to search with the export, build the index with it."""
    runtime = getattr(model, "finesim_runtime", None) or {}
    fmt, quantize = runtime.get("format", "torch"), runtime.get("quantize", "none")
    if fmt == "torch" and quantize in (None, "none"):
        return ""
    kind = f"{fmt} {'fp32' if quantize in (None, 'none') else quantize}"
    return (
        f" (the model given is a finesim export, {kind}: an index built with its source model does not take it; "
        "build the index with the export to search with it)"
    )


def _model_by_its_name(
    recorded: dict[str, Any], tried: str, encoder: str, device: str | None
) -> tuple[Any, str | None, str] | None:
    """The index's model loaded by its recorded name (a folder relative to the working directory), with its name and
    weights fingerprint, when ``tried`` (the recorded absolute folder) held another model and the name, read from
    here, is another folder whose weights are the recorded ones; else None."""
    name = recorded.get("name")
    if not name or not Path(name).is_dir() or Path(name).resolve() == Path(tried).resolve():
        return None
    try:
        loaded, _, shown, _ = load_index_model(name, encoder, device)
    except OSError:
        return None
    fingerprint = model_fingerprint(loaded)
    if fingerprint != recorded["sha256"]:
        return None
    logger.warning(
        "the index's model folder at build, %s, holds another model now; %s (its recorded name, from here) has the "
        "index's weights: using it",
        tried, name,
    )  # fmt: skip
    return loaded, shown, fingerprint


class ConditionalIndex:
    """A corpus indexed for conditional similarity search (use :meth:`build` or :meth:`open`).

    Attributes:
        store: the index folder (:class:`IndexStore`). encoder: the encoder type, ``bi``, ``tri`` or ``case``.
        model: the loaded model. embedder: the :class:`IndexEncoder`; ``embedder.encoded`` counts the texts embedded
        by this object.
    """

    def __init__(
        self,
        store: IndexStore,
        model: Any,
        encoder: str,
        *,
        batch_size: int = 64,
        show_progress: bool = False,
        device: str | None = None,
        model_lock: Any = None,
    ) -> None:
        self.store = store
        self.model = model
        self.encoder = encoder
        self.device = device
        self.embedder = IndexEncoder(model, encoder, batch_size=batch_size, lock=model_lock)
        self.show_progress = show_progress
        self._anns: dict[str, AnnFile] = {}
        # guards this object's shared state, each time briefly: the long steps (embedding the corpus under a
        # condition, building a faiss index, writing an added part) hold a lock of their own (below, or the
        # folder's writer lock), so that searches in other threads go on meanwhile
        self._lock = threading.RLock()
        self._condition_locks: dict[str, threading.Lock] = {}  # per condition key: one thread embeds it
        self._ann_locks: dict[str, threading.Lock] = {}  # per faiss index name: one thread loads or extends it
        self.first_stage_spec = FirstStageSpec.from_manifest(store.manifest.get("first_stage"))
        self._first_stage: FirstStageEncoder | None = None
        self._first_stage_at: str | None = None  # where open(first_stage=...) says the first-stage model is now
        self.rerank_cache = RerankCache()
        # the "mapped" first stage (finesim.index.two_stage.ConditionMap): its fit's sample size and ridge, and the
        # maps fitted so far (per condition key, least recently used dropped first)
        self.map_sample = MAP_SAMPLE
        self.map_ridge = MAP_RIDGE
        self._map_fit_batch = MAP_FIT_BATCH
        self._map_fit_yield = MAP_FIT_YIELD
        self._traffic = SearchTraffic()  # the searches running now: a background fit waits for a gap between them
        self._maps: OrderedDict[str, ConditionMap] = OrderedDict()
        self._map_locks: dict[str, threading.Lock] = {}  # one per condition key: a fit runs once at a time
        # map_wait False: a query whose condition has no map yet is answered at once ("borrowed" or "conditioned",
        # below) while a background thread fits the map (one fit at a time: another new condition's fit waits its
        # turn, its queries answered the same way meanwhile; at most MAP_PENDING conditions wait); True (the
        # default): it waits for the fit
        self.map_wait = True
        # map_wait False, and such a query's condition has no map yet: rank with the map of the nearest condition
        # whose map is held (the cosine of the model's embeddings of the two condition texts, at least
        # map_borrow_min_cosine; "borrowed") rather than as "conditioned" (False: never); measured in
        # benchmarks/two_stage_borrowed_map.py (docs/search.md)
        self.map_borrow = True
        self.map_borrow_min_cosine = MAP_BORROW_MIN_COSINE
        # how deep a two-stage search re-ranks its N candidates: all of them (None), or best first, a chunk at a time,
        # until the chunks stop changing the top k (finesim.index.rerank_depth.RerankDepth); an index without a first
        # stage has no candidates, so no default depth
        self._rerank_depth = ADAPTIVE_DEPTH if self.first_stage_spec is not None else None
        # which candidates a two-stage search re-ranks: None (the ranking's top N), or rounds steered by a map fitted
        # on the candidates re-ranked so far (finesim.index.feedback); only a "self" first stage with the conditioned
        # or mapped query (one space with the re-ranker's embeddings) can have it
        self._rerank_feedback = LOCAL_MAP_FEEDBACK if self._feedback_possible() else None
        self._map_conditions: dict[str, str] = {}  # condition key -> its text, for the maps held
        self._condition_vectors: OrderedDict[str, np.ndarray] = OrderedDict()  # condition text -> unit vector
        self._map_threads: dict[str, threading.Thread] = {}
        self._background_fit_turn = threading.Lock()
        self._searching = threading.local()  # per thread: the first stage its last search ranked candidates with
        self._map_errors: dict[str, Exception] = {}
        self._masks: OrderedDict[str, np.ndarray] = OrderedDict()
        self._scan_threads: int | None = None

    # ------------------------------------------------------------------ construction

    @classmethod
    def build(
        cls,
        model: Any,
        texts: Iterable[str],
        path: str | Path,
        *,
        encoder: str | None = None,
        conditions: Sequence[str] = (),
        dtype: str = "float32",
        approximate: str | None = None,
        approximate_params: dict[str, Any] | None = None,
        corpus: Sequence[dict[str, Any]] = (),
        first_stage: str | None = "auto",
        first_stage_query: str | None = None,
        ids: Iterable[str | int] | None = None,
        metadata: Iterable[dict[str, Any]] | None = None,
        batch_size: int = 64,
        device: str | None = None,
        show_progress: bool = False,
    ) -> ConditionalIndex:
        """Index ``texts`` with ``model`` into the new folder ``path`` and return the open index.

        Args:
            model: a name (folder, Hub id, alias such as ``minilm``), a scorer from :func:`finesim.load_scorer` or
                :class:`~finesim.evaluation.scoring.ConditionalScorer` (its name is recorded), or a loaded model
                (recorded without a name: :meth:`open` then needs ``model``).
            texts: the corpus (non-empty strings); row ``i`` is result ``index`` ``i``.
            encoder: ``bi``, ``tri`` or ``case``; inferred from the model (its finesim marker) when None.
            conditions: bi-encoder / CASE: conditions whose corpus embeddings are computed now.
            dtype: storage type of the vectors (``float32``; ``float16`` halves the size, scores then differ from
                the scorer's by about 1e-3).
            approximate: ``hnsw`` or ``ivf``: the default approximate index of this index, built now for a
                tri-encoder and for the given conditions. approximate_params: its parameters.
            corpus: descriptions of the corpus files (path, sha256, rows, column) for the manifest.
            first_stage: bi-encoder / CASE: the condition-independent first stage of two-stage search
                (:mod:`finesim.index.two_stage`): ``"auto"`` (``"self"`` for a bi-encoder, none for CASE),
                ``"self"``, another model's name, or None (no first stage: every new condition embeds the corpus).
            first_stage_query: ``"conditioned"``, ``"plain"``, ``"tri"`` or ``"mapped"`` (None: the first
                stage's default; :mod:`finesim.index.two_stage`).
            ids: one ID per text (a non-empty string or an integer, unique): results then carry ``"id"``, and every
                later ``add`` must give IDs too.
            metadata: one dict per text (JSON values): results then carry ``"metadata"``, and ``search(...,
                where={...})`` filters on it; every later ``add`` must give metadata too.
            batch_size: texts per encoding batch.
            device: torch device of the model when ``model`` is a name (None: automatic).
            show_progress: progress bars while embedding (with the count of texts).
        """
        texts = check_corpus(texts)
        conditions = [_check_text(c, "condition") for c in _text_list(conditions, "conditions")]
        meta = meta_rows(len(texts), ids, metadata)
        return cls._create(
            model,
            path,
            count=len(texts),
            batches=None,
            texts=texts,
            meta=meta,
            fields={"id": ids is not None, "metadata": metadata is not None},
            encoder=encoder,
            conditions=conditions,
            dtype=dtype,
            approximate=approximate,
            approximate_params=approximate_params,
            corpus=corpus,
            first_stage=first_stage,
            first_stage_query=first_stage_query,
            batch_size=batch_size,
            device=device,
            show_progress=show_progress,
        )

    @classmethod
    def _create(
        cls,
        model: Any,
        path: str | Path,
        *,
        count: int,
        batches: Iterable[Batch] | None,
        texts: list[str] | None = None,
        meta: list[dict[str, Any]] | None = None,
        fields: dict[str, bool] | None = None,
        encoder: str | None = None,
        conditions: Sequence[str] = (),
        dtype: str = "float32",
        approximate: str | None = None,
        approximate_params: dict[str, Any] | None = None,
        corpus: Sequence[dict[str, Any]] = (),
        first_stage: str | None = "auto",
        first_stage_query: str | None = None,
        batch_size: int = 64,
        device: str | None = None,
        show_progress: bool = False,
    ) -> ConditionalIndex:
        """Build from ``texts`` (embedded here) or from precomputed ``batches`` (see :func:`index_batches_spec`)."""
        from finesim._version import __version__

        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
        if approximate is not None:
            approximate_params = ann_params(approximate, approximate_params)
            import_faiss()  # before any embedding: the faiss index is built once the index is committed
        if count < 1:
            raise ValueError("the corpus is empty: nothing to index")
        folder = Path(path)
        prepare_new_folder(folder, make=False)  # made under its lock, below: a model that fails to load leaves none
        loaded, encoder, name, resolved = load_index_model(model, encoder, device)
        index_encoder = IndexEncoder(loaded, encoder, batch_size=batch_size)
        stage_model, stage_query = resolve_first_stage(encoder, first_stage, first_stage_query)
        stage = None
        if stage_model is not None:
            stage = FirstStageEncoder(index_encoder, stage_model, stage_query, device=device)
        fingerprint = model_fingerprint(loaded)
        created = utc_now()
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "finesim_version": __version__,
            "created": created,
            "updated": created,
            "model": {
                "name": name,
                "resolved": resolved,
                "sha256": fingerprint,
                "inputs_sha256": model_inputs_fingerprint(loaded),  # tokenizer, prompts: checked by open()
            },
            "encoder": index_encoder.describe(),
            "dims": {"index": index_encoder.dim},
            "dtype": dtype,
            "count": 0,
            "parts": [],
            "corpus": [],
            "fields": dict(fields or {"id": False, "metadata": False}),
            "approximate": None if approximate is None else {"kind": approximate, "params": approximate_params},
        }
        if stage is not None:
            manifest["first_stage"] = stage.spec().to_manifest()
        keys = {condition_key(fingerprint, encoder, c): c for c in conditions} if encoder != "tri" else {}
        if encoder == "tri" and conditions:
            logger.warning(
                "%d condition(s) not embedded: a tri-encoder index embeds its corpus once, for every condition",
                len(conditions),
            )
        with writer_lock(folder):
            if (folder / MANIFEST).exists():  # another writer committed an index here since the folder was checked
                raise FileExistsError(
                    f"{folder} already holds an index ({MANIFEST}), written by another build while this one was "
                    "starting: nothing was written; choose another folder"
                )
            remove_leftovers(folder, None)
            if batches is None:
                assert texts is not None
                batches = local_batches(index_encoder, texts, keys, stage, meta)
            entry = write_part(folder, manifest, count, batches, keys, show_progress=show_progress)
            manifest["parts"] = [entry]
            manifest["count"] = count
            manifest["corpus"] = [{**c, "part": entry["id"]} for c in corpus]
            store = IndexStore(folder, manifest)
            for key, condition in keys.items():
                store.write_condition_meta(key, condition)
            store.commit(manifest)
        index = cls(
            IndexStore.open(folder), loaded, encoder, batch_size=batch_size, show_progress=show_progress, device=device
        )
        index.embedder.encoded = index_encoder.encoded
        if stage is not None and stage.name != "self":
            index._first_stage = stage  # another model, already loaded
        if approximate is not None:
            if encoder == "tri":
                index._ann_for(None, approximate)
            for condition in conditions:
                index._ann_for(condition, approximate)
        return index

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        model: Any = None,
        device: str | None = None,
        batch_size: int = 64,
        show_progress: bool = False,
        model_lock: Any = None,
        first_stage: str | Path | None = None,
    ) -> ConditionalIndex:
        """Open an index folder, checking every file and that ``model`` (default: the model recorded in the
        manifest) is the model the index was built with: the same weights hash and, when the manifest records them
        (``model.inputs_sha256``: every index built since finesim records them), the same tokenizer (its ids) and
        sentence-transformers prompts. Another first-stage model (two-stage search) is loaded and checked the same
        way on first use (the first two-stage search or ``add``), so exact search needs none.

        Args:
            path: the index folder.
            model: the model the index was built with, as for :meth:`build`; None loads the recorded one.
            device: torch device of the model when it is loaded here (None: automatic).
            batch_size: texts per encoding batch (queries, new conditions, added texts).
            show_progress: progress bars while embedding.
            model_lock: what each call of the model holds (:class:`~finesim.index.encoders.IndexEncoder`'s
                ``lock``), shared with the model's other users (a server's scoring worker).
            first_stage: where the index's first-stage model (another model than the index's own, recorded at build)
                is now, when its recorded folder has moved; None: the recorded one.
        """
        store = IndexStore.open(path)
        recorded = store.manifest["model"]
        encoder = str(store.manifest["encoder"]["type"])
        given = model
        moved = None  # the recorded folder, when it is gone and the recorded name is tried instead
        if model is None:
            resolved, name = recorded.get("resolved"), recorded.get("name")
            model = resolved if resolved and Path(resolved).is_dir() else name
            if model is None:
                raise ValueError(
                    f"{store.root / MANIFEST}: the index was built from a model object and records no model name: "
                    "pass the model"
                )
            moved = resolved if resolved and Path(resolved).is_absolute() and model != resolved else None
        try:
            loaded, _, name, _ = load_index_model(model, encoder, device)
        except OSError as err:
            if moved is None:
                raise
            raise FileNotFoundError(
                f"{store.root / MANIFEST}: the index was built with {model!r}, the folder {moved} then, which is "
                f"gone, and {model!r} does not load now ({err}): name the model where it is now (--model PATH; "
                "model= in Python)"
            ) from None
        fingerprint = model_fingerprint(loaded)
        if fingerprint != recorded["sha256"] and given is None:
            # the recorded absolute folder holds another model now: the recorded name, read from here, may be the
            # model (a project copied or moved with its models, and the old place reused)
            alternative = _model_by_its_name(recorded, model, encoder, device)
            if alternative is not None:
                loaded, name, fingerprint = alternative
        built_with = recorded.get("name") or "a model object"
        shown = name or (type(given).__name__ if given is not None else "the recorded model")
        if fingerprint != recorded["sha256"]:
            raise ModelMismatchError(
                f"{store.root / MANIFEST}: the index was built with {built_with} (weights sha256 "
                f"{recorded['sha256'][:16]}) but {shown} has weights sha256 {fingerprint[:16]}: open it with the "
                "model it was built with, or build a new index" + _export_hint(loaded)
            )
        if recorded.get("inputs_sha256"):  # an index built before they were recorded: the weights alone are checked
            differ = inputs_differences(recorded["inputs_sha256"], model_inputs_fingerprint(loaded))
            if differ:
                raise ModelMismatchError(
                    f"{store.root / MANIFEST}: the index was built with {built_with}; {shown} has the same weights but "
                    f"not the same {describe_inputs_differences(differ)} as the index records ({', '.join(differ)} "
                    "sha256 differ), so it embeds texts otherwise: open it with the model folder the index was built "
                    "with (its tokenizer and prompts as they were), or build a new index"
                )
        else:
            logger.debug("%s records no inputs_sha256 (an older index): the weights alone are checked", store.root)
        index = cls(
            store, loaded, encoder, batch_size=batch_size, show_progress=show_progress, device=device,
            model_lock=model_lock,
        )  # fmt: skip
        index._point_first_stage(first_stage)
        return index

    def _point_first_stage(self, first_stage: str | Path | None) -> None:
        """Take ``first_stage`` (:meth:`open`'s) as where the index's first-stage model is now, checked against
        what the manifest records; with None, warn when the recorded first-stage folder is gone and its name does
        not name a folder from here (exact search still works; two-stage search will say what to do)."""
        spec = self.first_stage_spec
        manifest = self.store.root / MANIFEST
        if first_stage is not None:
            if spec is None or spec.model == "self":
                what = "none" if spec is None else "the index's own model ('self')"
                raise ValueError(
                    f"{manifest}: first_stage={str(first_stage)!r} names where the index's first-stage model is now, "
                    f"but this index's first stage is {what}: leave it out"
                )
            self._first_stage_at = str(first_stage)
            return
        if spec is None or spec.model == "self" or not self._first_stage_gone(spec):
            return
        logger.warning(
            "%s: the first-stage model %r (the folder %s at build) is not found from here: exact search works, a "
            "two-stage search or add needs it (name it where it is now: first_stage=PATH, --first-stage PATH)",
            manifest, spec.model, spec.resolved,
        )  # fmt: skip

    @staticmethod
    def _first_stage_gone(spec: FirstStageSpec) -> bool:
        """Whether the first-stage model was a folder (its recorded absolute path) that is gone, and its name as
        given names no folder from here either (read from the file system only: no model is loaded)."""
        resolved = spec.resolved
        moved = bool(resolved) and Path(str(resolved)).is_absolute() and not Path(str(resolved)).is_dir()
        return moved and not Path(spec.model).expanduser().is_dir()

    def _first_stage_location(self, spec: FirstStageSpec) -> str:
        """The first-stage model to load: where :meth:`open` was told it is, else its recorded folder when it
        exists, else its name as given (a folder relative to the working directory, or a Hub id)."""
        if self._first_stage_at is not None:
            return self._first_stage_at
        return spec.resolved if spec.resolved and Path(spec.resolved).is_dir() else spec.model

    # ------------------------------------------------------------------ adding

    def add(
        self,
        texts: Iterable[str],
        *,
        ids: Iterable[str | int] | None = None,
        metadata: Iterable[dict[str, Any]] | None = None,
        corpus: Sequence[dict[str, Any]] = (),
        update_conditions: bool = True,
    ) -> int:
        """Append ``texts`` (rows ``len(self) ..``) atomically and idempotently; returns the row count.

        The new part (its texts, IDs / metadata, vectors and, with ``update_conditions``, its embeddings under every
        stored condition of a bi-encoder or CASE index) is written under temporary names, then the manifest is
        replaced in one rename: a failure or a kill at any point leaves the index as it was, and a committed add
        leaves nothing to embed later. Adding a corpus file whose SHA-256 the manifest records (``corpus=``), or
        texts (and IDs / metadata) identical to a part's, adds nothing: the count is returned unchanged and a
        warning logged. ``ids`` / ``metadata``: as for :meth:`build`; required when the index has them, and an ID
        already in the index is refused.
        """
        texts = check_corpus(texts, "added corpus")
        meta = meta_rows(len(texts), ids, metadata, "added corpus")
        fields = {"id": ids is not None, "metadata": metadata is not None}
        return self._append(
            len(texts), None, texts=texts, meta=meta, fields=fields, corpus=corpus, update_conditions=update_conditions
        )

    def _append(
        self,
        count: int,
        batches: Iterable[Batch] | None,
        *,
        texts: list[str] | None = None,
        meta: list[dict[str, Any]] | None = None,
        fields: dict[str, bool] | None = None,
        corpus: Sequence[dict[str, Any]] = (),
        update_conditions: bool = True,
        conditions: Sequence[str] = (),
    ) -> int:
        """Write and commit a new part from ``texts`` (embedded here) or ``batches`` (embedded elsewhere: Ray).
        ``conditions``: conditions whose embeddings the part gets before the commit (with ``update_conditions``,
        every condition stored in the index too)."""
        if count < 1:
            raise ValueError("the added corpus is empty: nothing to add")
        root = self.store.root
        # the folder's writer lock serialises adds (this process's threads too: each takes its own flock); this
        # object's lock is taken only to swap in the new store, so searches go on while the part is embedded
        with writer_lock(root):
            current = IndexStore.open(root)  # another process may have added since this index was opened
            manifest = dict(current.manifest)
            remove_leftovers(root, manifest)
            check_fields(current, fields or {"id": False, "metadata": False})
            digest = lines_sha256(texts) if texts is not None else None
            meta_digest = lines_sha256(meta) if meta is not None else None
            duplicate = find_duplicate(manifest, corpus=corpus, texts_sha256=digest, meta_sha256=meta_digest)
            if duplicate is not None:
                logger.warning("%s", duplicate_message(duplicate))
                with self._lock:
                    self.store = current
                return len(self)
            if meta is not None and current.fields["id"]:
                check_new_ids(current.ids(), meta, corpus)
            wanted = list(conditions)
            if update_conditions and self.encoder != "tri":
                wanted += [c["condition"] for c in current.stored_conditions()]
            keys = {self.key(c): c for c in dict.fromkeys(wanted)} if self.encoder != "tri" else {}
            if batches is not None and not update_conditions and self.encoder != "tri":  # embedded elsewhere (Ray)
                late = [c["condition"] for c in current.stored_conditions() if c["key"] not in keys]
                if late:  # stored by another process since the embedding started: not covered by this part
                    logger.warning(
                        "%d condition(s) stored since this add started have no embeddings for its rows yet (their "
                        "next exact search embeds them; `auto` searches them two-stage meanwhile): %s",
                        len(late), "; ".join(repr(c) for c in late[:5]) + (" ..." if len(late) > 5 else ""),
                    )  # fmt: skip
            if batches is None:
                assert texts is not None
                batches = local_batches(self.embedder, texts, keys, self.first_stage(), meta)
            entry = write_part(root, manifest, count, batches, keys, show_progress=self.show_progress)
            if texts is None:  # texts read and embedded elsewhere (Ray): known only now
                written = (entry.get("meta") or {}).get("sha256")
                duplicate = find_duplicate(manifest, texts_sha256=entry["texts_sha256"], meta_sha256=written)
                if duplicate is not None:
                    remove_leftovers(root, manifest)  # the part just written is not listed: it goes
                    logger.warning("%s", duplicate_message(duplicate))
                    with self._lock:
                        self.store = current
                    return len(self)
            manifest["parts"] = [*manifest["parts"], entry]
            manifest["count"] = int(manifest["count"]) + count
            manifest["corpus"] = [*manifest.get("corpus", []), *({**c, "part": entry["id"]} for c in corpus)]
            manifest["updated"] = utc_now()
            for key, condition in keys.items():
                current.write_condition_meta(key, condition)
            current.commit(manifest)
            for kept in (root / MAPS).glob("*.npz"):  # "mapped" first-stage maps of the rows before this add
                kept.unlink(missing_ok=True)
            opened = IndexStore.open(root)
            with self._lock:
                self.store = opened
                self._masks.clear()
        return len(self)

    # ------------------------------------------------------------------ conditions (bi / CASE)

    def key(self, condition: str) -> str:
        """The storage key of a condition's embeddings for this index's model."""
        return condition_key(self.store.manifest["model"]["sha256"], self.encoder, condition)

    def prepare(self, conditions: Sequence[str]) -> int:
        """Bi-encoder / CASE: compute and store the corpus embeddings of ``conditions`` that are not stored yet
        (a tri-encoder needs nothing). Returns how many corpus rows this call embedded (not another thread's)."""
        conditions = _text_list(conditions, "conditions")
        if self.encoder == "tri":
            return 0
        before = self.embedder.encoded_by_this_thread()
        for condition in conditions:
            self._ensure_condition(_check_text(condition, "condition"))
        return self.embedder.encoded_by_this_thread() - before

    def _ensure_condition(self, condition: str) -> str:
        """The key of ``condition``, its embeddings computed first for every part that lacks them.

        The embedding (an hour at a million texts) holds a lock of this condition only: searches and adds in other
        threads go on meanwhile, and a second thread asking for the same condition waits for the first instead of
        embedding it again. A part that an add committed meanwhile without this condition is embedded too."""
        key = self.key(condition)
        with self._lock:
            embedding = self._condition_locks.setdefault(key, threading.Lock())
        if not embedding.acquire(blocking=False):
            with self._traffic.aside():  # waiting for another thread's embedding: a background map fit may go on
                embedding.acquire()
        try:
            done: set[str] = set()
            settled = False
            while True:
                store = self.store  # one snapshot: an add() in another thread replaces self.store
                missing = [p for p in store.parts if p.id not in done and store.condition_array(key, p) is None]
                if not missing and (settled or not done):
                    return key
                if not missing:
                    # an add that chose its conditions before this one was stored does not embed it for its part:
                    # wait for such an add's commit (adds hold the folder's writer lock from that choice to their
                    # commit; a later one sees this condition stored), then look again
                    with writer_lock(store.root):
                        settled = True
                    continue
                self._embed_condition(store, key, condition, missing)
                done.update(p.id for p in missing)
        finally:
            embedding.release()

    def _embed_condition(self, store: IndexStore, key: str, condition: str, parts: list[Part]) -> None:
        """Embed and store the texts of ``parts`` under ``condition`` (:meth:`_ensure_condition` holds its lock)."""
        store.write_condition_meta(key, condition)
        total = sum(p.count for p in parts)
        logger.info("embedding %d texts for the condition %r (stored for later queries)", total, condition)
        with _progress(total, f"corpus for condition {condition[:40]!r}", self.show_progress) as bar:
            for part in parts:
                writer = ArrayWriter(store.condition_file(key, part), part.count, store.dim, self.dtype)
                try:
                    start = 0
                    for texts in store.iter_texts(part, ENCODE_CHUNK):
                        writer.write_rows(start, self.embedder.conditioned(texts, condition))
                        start += len(texts)
                        bar.update(len(texts))
                    writer.finish()
                except BaseException:
                    writer.abort()
                    raise

    def first_stage(self) -> FirstStageEncoder | None:
        """The first stage of two-stage search (None when the index has none), its model loaded on first use (the
        first two-stage search or add: exact search needs none) and checked against the weights hash and, when
        recorded, the tokenizer and prompts hashes the manifest records."""
        spec = self.first_stage_spec
        if spec is None:
            return None
        with self._lock:
            if self._first_stage is None:
                if spec.model == "self":
                    self._first_stage = FirstStageEncoder(self.embedder, "self", spec.query)
                else:
                    self._first_stage = self._load_first_stage(spec)
        return self._first_stage

    def _load_first_stage(self, spec: FirstStageSpec) -> FirstStageEncoder:
        """Load and check the first-stage model another than the index's own (:meth:`first_stage` holds the lock)."""
        from finesim.models.hub import ModelResolutionError

        manifest = self.store.root / MANIFEST
        given = self._first_stage_at
        name = self._first_stage_location(spec)
        shown = f"{spec.model} (given as {given})" if given is not None else spec.model
        try:
            stage = FirstStageEncoder(self.embedder, name, spec.query, device=self.device)
        except ModelResolutionError as err:
            if given is not None:
                where = f"given as {given!r}; recorded as {spec.model!r}"
            elif spec.resolved and Path(spec.resolved).is_absolute():
                where = f"recorded as {spec.model!r}, the folder {spec.resolved} when the index was built"
            else:
                where = f"recorded as {spec.model!r}"
            raise FileNotFoundError(
                f"{manifest}: the index's first-stage model ({where}) cannot be found: {err}. Two-stage search and "
                "add need it: name the folder where it is now (ConditionalIndex.open(..., first_stage=PATH); "
                "--first-stage PATH on `finesim index search` / `add`), or search exactly (strategy='exact', "
                "--strategy exact), which does not use it"
            ) from None
        if spec.sha256 and stage.sha256 != spec.sha256:
            raise ModelMismatchError(
                f"{manifest}: the first-stage model {shown} has other weights "
                f"(sha256 {str(stage.sha256)[:16]}) than the index was built with ({spec.sha256[:16]})"
            )
        differ = inputs_differences(spec.inputs_sha256, stage.inputs_sha256)
        if differ:
            raise ModelMismatchError(
                f"{manifest}: the first-stage model {shown} has the weights the index was built with but not the "
                f"same {describe_inputs_differences(differ)} ({', '.join(differ)} sha256 differ): use the "
                "first-stage model folder the index was built with, or build a new index"
            )
        return stage

    def has_condition(self, condition: str) -> bool:
        """Whether ``condition``'s corpus embeddings are stored for every row (exact search is then cheap)."""
        if self.encoder == "tri":
            return True
        key = self.key(condition)
        return all(self.store.condition_array(key, p) is not None for p in self.store.parts)

    def map_needed(self, condition: str) -> bool:
        """Whether the next search under ``condition`` (strategy ``auto``) would first fit its map, or read it from
        ``maps/``: a "mapped" first stage, a condition whose corpus embeddings are not stored, and no map held for
        the index's current size and :attr:`map_sample` / :attr:`map_ridge`. :meth:`prepare_map` does that step."""
        spec = self.first_stage_spec
        if self.encoder == "tri" or spec is None or spec.query != MAPPED or self.has_condition(condition):
            return False
        with self._lock:
            held = self._maps.get(self.key(condition))
            return held is None or not held.fits(len(self), *self._map_options())

    def prepare_map(self, condition: str) -> bool:
        """Fit (or read from ``maps/``) the map that a two-stage search under ``condition`` needs, now, unless it is
        held: the step the condition's first search would otherwise take inline. A server runs it in a thread of
        its own, taking turns at the model lock with the scoring worker, so that other requests go on meanwhile.
        Returns whether a map was fitted or read (False: none is needed, see :meth:`map_needed`)."""
        condition = _check_text(condition, "condition")
        if not self.map_needed(condition):
            return False
        self._condition_map(condition, self.key(condition))
        return True

    @property
    def conditions(self) -> list[str]:
        """Bi-encoder / CASE: the conditions whose corpus embeddings are stored (for every row or some parts)."""
        return [c["condition"] for c in self.store.stored_conditions()]

    # ------------------------------------------------------------------ search

    def __len__(self) -> int:
        return self.store.count

    @property
    def dtype(self) -> str:
        """The stored vectors' type: ``float32`` or ``float16``."""
        return self.store.dtype

    def search(
        self,
        query: str,
        condition: str | None,
        k: int = 10,
        *,
        approximate: bool | str = False,
        candidates: int | None = None,
        strategy: str = "auto",
        where: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The ``k`` corpus texts most similar to ``query`` with respect to ``condition``, best first.

        Returns plain data, ``[{"index": row, "text": text, "score": score}, ...]`` (``index``: the 0-based row in
        the corpus as built and added), ready to serialise as JSON; an index with IDs / metadata adds ``"id"`` /
        ``"metadata"`` to each. ``approximate``: False (exact), True (the index's approximate kind, HNSW by default)
        or ``"hnsw"`` / ``"ivf"``; ``candidates``: how many candidates an approximate tri-encoder search or a
        two-stage search re-scores exactly (defaults ``max(100, 10 k)`` and ``max(200, 10 k)``).

        ``condition`` None (given explicitly: ``search(query, None)``) is a search without a condition: the corpus
        ranked by the cosine of the model's embeddings of the query and of each text alone, read from the stored
        vectors (no corpus text is embedded): a bi-encoder index's first-stage vectors (``first_stage="self"``, the
        default), a tri-encoder index's stage vectors (a ``hadamard`` or ``hypernet`` head without ``transform``,
        whose stage vectors are the sentence encoder's embeddings). Other indexes refuse it, saying why and what to
        do (:meth:`plain_search_refusal`). Each result then also carries ``"condition": None``, so a stored or
        served answer says it was unconditioned. ``approximate`` searches the faiss index of those vectors (its
        ``max(candidates, k)`` nearest re-scored exactly), ``where`` filters as below, ``strategy`` must be
        ``"auto"`` or ``"exact"``.

        ``strategy`` (bi-encoder / CASE): ``"exact"`` scores every row under the condition (embedding the corpus for
        it on its first use); ``"two-stage"`` re-ranks the first stage's candidates (:mod:`finesim.index.two_stage`;
        ``approximate`` then applies to the first stage); ``"auto"`` is exact when the condition's corpus embeddings
        are stored, else two-stage when the index has a first stage, else exact.

        ``where``: ``{key: value, ...}``, only rows whose metadata has each key with that value (exactly; a string
        value also matches a number or boolean spelled that way). Exact search (and an exact first stage) filters
        before taking the top k; an approximate search or an approximate first stage filters its candidates, so it
        may return fewer than ``k``.

        Raises:
            IndexFormatError: a stored vector the search reads is NaN or infinite (the message names the file and
                row; ``finesim index info --verify`` checks every file against its recorded SHA-256).
        """
        rows, scores = self.search_rows(
            query, condition, k, approximate=approximate, candidates=candidates, strategy=strategy, where=where
        )
        plain = condition is None
        fields = self.store.fields
        out = []
        for row, text, score, meta in zip(rows, self.store.texts(rows), scores, self.store.row_meta(rows)):
            item: dict[str, Any] = {"index": int(row), "text": text, "score": float(score)}
            if fields["id"]:
                item["id"] = meta.get("id")
            if fields["metadata"]:
                item["metadata"] = meta.get("metadata") or {}
            if plain:
                item["condition"] = None
            out.append(item)
        return out

    def search_rows(
        self,
        query: str,
        condition: str | None,
        k: int = 10,
        *,
        approximate: bool | str = False,
        candidates: int | None = None,
        strategy: str = "auto",
        where: Mapping[str, Any] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)`` of the best ``k``, best first (ties: lower row first); see :meth:`search`."""
        with self._traffic.search():  # counted while it runs: a background map fit waits for a gap
            return self._search_rows(
                query, condition, k, approximate=approximate, candidates=candidates, strategy=strategy, where=where
            )

    def _search_rows(
        self,
        query: str,
        condition: str | None,
        k: int,
        *,
        approximate: bool | str,
        candidates: int | None,
        strategy: str,
        where: Mapping[str, Any] | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search_rows` itself."""
        self._searching.first_stage = None
        query = _check_text(query, "query")
        if condition is not None:
            condition = _check_text(condition, "condition")
        k = min(_whole(k, "k"), len(self))
        candidates = None if candidates is None else _whole(candidates, "candidates")
        kind = self._approximate_kind(approximate)
        strategy = self._strategy(strategy, condition)
        refusal = self.plain_search_refusal() if condition is None else None
        if refusal is not None:
            raise ValueError(f"{self.store.root}: {refusal}")
        mask = self._where_mask(where)
        if mask is not None and not mask.any():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if condition is None:
            return self._plain_rows(query, k, kind, candidates, mask)
        if self.encoder == "tri":
            return self._tri_rows(self.embedder.tri_query(query, condition), None, k, kind, candidates, mask)
        if strategy == "two-stage":
            return self._two_stage(query, condition, k, kind, candidates, mask)
        vector = _finite_query(torch.as_tensor(self.embedder.conditioned([query], condition)[0]))
        retries = 0
        while True:
            key = self._ensure_condition(condition)
            try:
                return self._stored_condition_rows(key, condition, vector, k, kind, candidates, mask)
            except NotEmbeddedError:  # an add committed a part without it meanwhile: embed that part, scan again
                retries += 1
                if retries > NOT_EMBEDDED_RETRIES:
                    raise

    def _stored_condition_rows(
        self,
        key: str,
        condition: str,
        vector: torch.Tensor,
        k: int,
        kind: str | None,
        candidates: int | None,
        mask: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` by the stored embeddings of ``condition`` (key ``key``) against the query's ``vector``:
        exactly, or among a faiss index's candidates (``kind``), re-scored exactly."""

        def dot(block: np.ndarray) -> torch.Tensor:
            return as_float_tensor(block) @ vector

        if kind is None:
            if self.store.dtype == "float16" and HALF_PRODUCT and not _reduced_half_sums():
                certified = self._certified_half_scan(key, vector, k, mask, dot)
                if certified is not None:
                    return certified
            return self._exact(key, dot, k, mask, split=True)
        ann = self._ann_for(condition, kind)
        found = _keep(ann.search(vector.numpy(), max(candidates or k, k)), mask)
        return best_rows(dot(self._gather(found, key)).numpy(), found, k)

    def plain_search_refusal(self) -> str | None:
        """Why this index cannot search without a condition, with what to do (None: it can); see
        :func:`~finesim.index.two_stage.plain_search_refusal`."""
        return plain_search_refusal(self.store.manifest)

    def _plain_rows(
        self, query: str, k: int, kind: str | None, candidates: int | None, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` by the cosine of the query's and the texts' embeddings alone (see :meth:`search`): over the
        tri-encoder's stage vectors or the bi-encoder's first-stage vectors, exactly or among the faiss index's
        ``max(candidates, k)`` nearest (the faiss index those vectors have for a tri-encoder's or a first stage's
        searches), re-scored exactly."""
        if self.encoder == "tri":
            key, vector = None, self.embedder.stage([query])[0]
        else:
            key, vector = FIRST_STAGE, self.embedder.plain([query])[0]
        unit = _finite_query(torch.nn.functional.normalize(torch.as_tensor(vector, dtype=torch.float32), dim=-1))

        def cosine(block: np.ndarray) -> torch.Tensor:
            return torch.nn.functional.normalize(as_float_tensor(block), dim=-1) @ unit

        if kind is None:
            return self._exact(key, cosine, k, mask)
        ann = self._ann_for(None, kind) if key is None else self._ann_for_first_stage(kind)
        found = _keep(ann.search(unit.numpy(), max(candidates or k, k)), mask)
        return best_rows(cosine(self._gather(found, key)).numpy(), found, k)

    def _tri_rows(
        self,
        tri_query: Any,
        key: str | None,
        k: int,
        kind: str | None,
        candidates: int | None,
        mask: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """A tri-encoder's top ``k`` under its condition (``tri_query``: a :class:`~finesim.index.tri.TriQuery`)
        over the stage vectors ``key``: None for a tri-encoder index's own, ``FIRST_STAGE`` for a tri-encoder first
        stage of two-stage search. Exact, or (``kind``) the faiss candidates of the normalised stage vectors
        re-scored with the head (``candidates``, default ``max(100, 10 k)``)."""
        if kind is None:
            return self._exact(key, tri_query.scores, k, mask)
        ann = self._ann_for(None, kind) if key is None else self._ann_for_first_stage(kind)
        wanted = candidates if candidates is not None else max(100, 10 * k)
        found = _keep(ann.search(normalized(tri_query.candidate_vector()), max(wanted, k)), mask)
        return best_rows(tri_query.scores(self._gather(found, key)).numpy(), found, k)

    def count_where(self, where: Mapping[str, Any] | None) -> int:
        """How many rows the filter ``where`` keeps (as :meth:`search` reads it; every row for None or ``{}``)."""
        mask = self._where_mask(where)
        return len(self) if mask is None else int(mask.sum())

    def _where_mask(self, where: Mapping[str, Any] | None) -> np.ndarray | None:
        """The rows ``where`` keeps (a bool per row), or None for no filter; cached per filter."""
        if where is None or (isinstance(where, Mapping) and not where):
            return None
        if not isinstance(where, Mapping):
            raise ValueError(f"where must be a dict of metadata key -> value, got {type(where).__name__}")
        if not self.store.fields["metadata"]:
            raise ValueError(
                f"{self.store.root}: this index has no metadata to filter on (build it with metadata=, or "
                "--metadata-columns)"
            )
        keys = self.store.metadata_keys()
        # a numpy scalar (a value read from a DataFrame) filters as its Python value
        where = {key: _python_value(value) for key, value in where.items()}
        for key, value in where.items():
            if key not in keys:
                raise ValueError(f"where: no row has the metadata key {key!r}; the keys are: {', '.join(keys)}")
            if value is not None and not isinstance(value, (str, int, float, bool)):
                raise ValueError(f"where: the value of {key!r} must be a string, number, boolean or null")
        cache_key = json.dumps([[p.id for p in self.store.parts], sorted(where.items())], default=str)
        with self._lock:
            if cache_key in self._masks:
                self._masks.move_to_end(cache_key)
                return self._masks[cache_key]
        found = []
        for part in self.store.parts:
            for batch in self.store.iter_meta(part, 65536):
                for item in batch:
                    data = item.get("metadata") or {}
                    found.append(all(k in data and metadata_matches(data[k], v) for k, v in where.items()))
        mask = np.asarray(found, dtype=bool)
        with self._lock:
            self._masks[cache_key] = mask
            while len(self._masks) > MASKS:
                self._masks.popitem(last=False)
        return mask

    def _strategy(self, strategy: str, condition: str | None) -> str:
        """The strategy ``strategy`` resolves to for ``condition`` (``exact`` or ``two-stage``), checked. A search
        without a condition (None) ranks the stored vectors directly: always ``exact``."""
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {list(STRATEGIES)}, got {strategy!r}")
        if condition is None and strategy == "two-stage":
            raise ValueError(
                "a search without a condition has no two-stage search: it ranks the stored embeddings of the texts "
                "alone directly (search it with strategy 'exact' or 'auto')"
            )
        if self.encoder == "tri" or condition is None:
            if strategy == "two-stage":
                raise ValueError("a tri-encoder index has no two-stage search: its corpus vectors already serve any "
                                 "condition (search it with strategy 'exact' or 'auto')")  # fmt: skip
            return "exact"
        if strategy == "two-stage" and self.first_stage_spec is None:
            raise ValueError(
                f"{self.store.root}: this index has no first stage for two-stage search (built with "
                "first_stage=None, or before two-stage search existed): search it exactly, or build it again"
            )
        if strategy == "auto":
            return "two-stage" if self.first_stage_spec is not None and not self.has_condition(condition) else "exact"
        return strategy

    def _two_stage(
        self, query: str, condition: str, k: int, kind: str | None, candidates: int | None, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Re-rank the first stage's candidates under ``condition`` (see :mod:`finesim.index.two_stage`); a filter
        applies to the first stage (before its top N when it is exact)."""
        stage = self.first_stage()
        assert stage is not None
        wanted = max(candidates if candidates is not None else max(DEFAULT_CANDIDATES, 10 * k), k)
        query_vector = _finite_query(torch.as_tensor(self.embedder.conditioned([query], condition)[0]))
        key = self.key(condition)
        used = stage.query_mode
        depth, feedback = self.rerank_depth, self.rerank_feedback
        fetch = wanted if feedback is None else feedback.fetch(wanted)  # feedback's pool: the ranking's top (P + 1) N
        # the vectors whose cosine with the query is the ranking's score, from which feedback fits its local map
        # (finesim.index.feedback): the first-stage vectors (conditioned), or their mapped, unit rows (a map); None:
        # no feedback for this ranking (tri, plain, another model's)
        steer: Callable[[np.ndarray], np.ndarray] | None = None
        if stage.query_mode == TRI:  # the tri-encoder's own top N under the condition, as its index ranks them
            found, _ = self._tri_rows(stage.tri_query(query, condition), FIRST_STAGE, wanted, kind, None, mask)
        elif stage.query_mode == MAPPED:  # the corpus vectors mapped under the condition (ConditionMap)
            fitted = self._condition_map(condition, key) if self.map_wait else self._map_or_fit_later(condition, key)
            if fitted is None and self.map_borrow:  # its map is being fitted in the background: borrow one
                fitted = self._borrowed_map(condition, key)
                used = BORROWED if fitted is not None else used
            if fitted is not None:
                found = self._mapped_rows(fitted, query_vector, fetch, kind, mask)
                steer = functools.partial(self._mapped_unit_rows, fitted)
            else:  # nothing to borrow (or map_borrow False): ranked as "conditioned" meanwhile
                used = "conditioned"
                found = self._nearest_first_stage(query_vector, fetch, kind, mask)
                steer = functools.partial(self._gather, key=FIRST_STAGE)
        else:
            same = stage.embedder is self.embedder and stage.query_mode == "conditioned"
            vector = query_vector if same else _finite_query(torch.as_tensor(stage.query(query, condition)))
            found = self._nearest_first_stage(vector, fetch if same else wanted, kind, mask)
            steer = functools.partial(self._gather, key=FIRST_STAGE) if same else None

        def score(rows: np.ndarray) -> np.ndarray:
            return (as_float_tensor(self._conditioned_rows(key, condition, rows)) @ query_vector).numpy()

        if feedback is not None and steer is not None:  # rounds steered by a local map (finesim.index.feedback)
            # the pairs earlier searches re-ranked join the fit where the ranking's vectors are the stored ones (a
            # map's unit rows change with the map: a borrowed one, then the condition's own)
            pairs = self.rerank_cache.moments.of(key) if used == "conditioned" else None
            top = feedback.rerank(
                found, wanted, k, query_vector.numpy(), steer,
                lambda rows: self._conditioned_rows(key, condition, rows), depth, pairs,
            )[:2]  # fmt: skip
        else:
            top = best_rows(score(found), found, k) if depth is None else depth.rerank(found, k, score)[:2]
        self._searching.first_stage = used
        return top

    @property
    def map_fit_batch(self) -> int:
        """Texts a map's fit in the background (``map_wait`` False) embeds per model call, each call holding the
        model lock that searches' calls wait for (:data:`~finesim.index.two_stage.MAP_FIT_BATCH`); a fit a request
        waits for uses the encoder's batch size."""
        return self._map_fit_batch

    @map_fit_batch.setter
    def map_fit_batch(self, value: int) -> None:
        self._map_fit_batch = _count(value, "map_fit_batch must be a positive integer")

    @property
    def map_fit_yield(self) -> float:
        """Seconds a map's fit in the background (``map_wait`` False) waits, before each of its steps (a batch of its
        sample, a chunk of its pass over the first-stage vectors), for a moment when no search of this index runs
        (:data:`~finesim.index.two_stage.MAP_FIT_YIELD`, at most :data:`~finesim.index.two_stage.MAP_FIT_YIELD_MAX`);
        0: no waiting. Searches then keep the model and the cores while a fit goes on, and the fit takes longer under
        load (a search waiting for that very fit is not counted). A fit a request waits for never waits."""
        return self._map_fit_yield

    @map_fit_yield.setter
    def map_fit_yield(self, value: float) -> None:
        self._map_fit_yield = check_map_fit_yield(value)

    @property
    def scan_threads(self) -> int | None:
        """Python threads an exact scan by one matrix-vector product is split over (a first stage's, a stored
        condition's): None (the default) ``torch.get_num_threads()``, or a positive int; 1 keeps a search on one
        core, for a process answering several searches at once. torch runs a float32 matrix-vector product on one
        thread on CPU, so the split is what puts the other cores to work: on the 2-core host of
        ``benchmarks/two_stage_pooled.py --latency``, 2 threads took 77-121 ms off the p50 of each exact-scan
        setting over 1M texts against 1 (``two_stage_recall_1m_pooled.json``). A float16 index's scans by the half
        product (its first stage's, a stored condition's) are not split: that product already runs on torch's
        threads (:func:`~finesim.index.tri.candidate_dot`)."""
        return self._scan_threads

    @scan_threads.setter
    def scan_threads(self, value: int | None) -> None:
        self._scan_threads = None if value is None else _count(value, "scan_threads must be a positive integer or None")

    @property
    def rerank_depth(self) -> RerankDepth | None:
        """How deep a two-stage search re-ranks its N candidates: None, every one of them (the default,
        :data:`~finesim.index.rerank_depth.ADAPTIVE_DEPTH`), or a :class:`~finesim.index.rerank_depth.RerankDepth`:
        best first, a chunk at a time, until the chunks stop changing the top k. Set it to None, a ``RerankDepth``,
        ``"all"`` or ``"FIRST,STEP,PATIENCE"`` (checked when set). An index without a first stage searches exactly
        and refuses any setting but None, ``"all"`` included, as ``finesim index search`` and ``finesim serve``
        refuse the option. Candidates already in the re-ranking cache count toward its chunks like the others
        (docs/search.md)."""
        return self._rerank_depth

    @rerank_depth.setter
    def rerank_depth(self, value: RerankDepth | str | None) -> None:
        depth = parse_rerank_depth(value)  # a malformed value is refused first, whatever the index
        if value is not None and self.first_stage_spec is None:
            raise ValueError(
                "rerank_depth applies to two-stage searches, and this index has no first stage (it searches "
                "exactly): leave it out"
            )
        self._rerank_depth = depth

    @property
    def rerank_feedback(self) -> LocalMapFeedback | None:
        """Which candidates a two-stage search re-ranks when its first stage is the bi-encoder's own (``self``): None,
        the ranking's top N; or a :class:`~finesim.index.feedback.LocalMapFeedback` (the default for such an index,
        :data:`~finesim.index.feedback.LOCAL_MAP_FEEDBACK`): the N re-ranks in rounds, each after the first taken from
        the ranking's next ``pool x N`` candidates not yet re-ranked by a map fitted on the candidates re-ranked so far
        — from the first-stage vectors for the ``conditioned`` ranking, from the mapped ones (a residual on the map) for
        a ``mapped`` or ``borrowed`` ranking. For the ``conditioned`` ranking the fit also takes the pairs the
        condition's earlier searches re-ranked (``earlier``, the default; summed in
        ``rerank_cache.moments``, :class:`~finesim.index.moments.PairMoments`). Set it to None, ``"none"``,
        ``"local-map"``, ``"local-map:ROUNDS,RIDGE,POOL[,earlier|own]"`` or a ``LocalMapFeedback`` (checked when
        set). An index whose first stage is not ``self`` with the ``conditioned`` or ``mapped`` query (none,
        another model, a tri-encoder, the ``plain`` query) has None and refuses any setting, ``"none"`` included.
        With :attr:`rerank_depth` set, its chunks are the rounds and its patience may stop them early
        (docs/search.md)."""
        return self._rerank_feedback

    @rerank_feedback.setter
    def rerank_feedback(self, value: LocalMapFeedback | str | None) -> None:
        feedback = parse_rerank_feedback(value)  # a malformed value is refused first, whatever the index
        if value is not None and not self._feedback_possible():  # "none" too, as rerank_depth refuses "all"
            raise ValueError(
                "rerank_feedback needs a two-stage index whose first stage is the model's own embeddings ('self') "
                f"with the conditioned or mapped query; this index's first stage is {self._first_stage_words()}: "
                "leave it out"
            )
        self._rerank_feedback = feedback

    def _feedback_possible(self) -> bool:
        """Whether two-stage searches can take feedback: a ``self`` first stage ranked by the ``conditioned`` query
        or a map (``mapped``); a ``plain`` query ranks in another space than the re-ranker's embeddings."""
        spec = self.first_stage_spec
        return spec is not None and takes_feedback(spec.model, spec.query)

    def _first_stage_words(self) -> str:
        spec = self.first_stage_spec
        return "none (it searches exactly)" if spec is None else f"{spec.model!r} (query mode {spec.query!r})"

    def last_first_stage(self) -> str | None:
        """The first stage whose candidates this thread's last search re-ranked: ``"conditioned"``, ``"mapped"``,
        ``"borrowed"``, ``"plain"`` or ``"tri"`` (a ``mapped`` index answers ``"borrowed"``, the map of the nearest
        condition it holds, or ``"conditioned"`` when it holds none near enough or ``map_borrow`` is False, while a
        new condition's map is fitted in the background, ``map_wait`` False); None when it was no two-stage search
        (exact, a tri-encoder index, a search without a condition) or it failed."""
        return getattr(self._searching, "first_stage", None)

    def _nearest_first_stage(
        self, vector: torch.Tensor, wanted: int, kind: str | None, mask: np.ndarray | None
    ) -> np.ndarray:
        """The ``wanted`` rows whose first-stage vectors have the highest dot product with ``vector``: exactly, or
        through the faiss index of the first-stage vectors (``kind``)."""
        if kind is None:
            return self._dot_scan(FIRST_STAGE, vector, wanted, mask)[0]
        return _keep(self._ann_for_first_stage(kind).search(vector.numpy(), wanted), mask)

    def _certified_half_scan(
        self, key: str, vector: torch.Tensor, k: int, mask: np.ndarray | None, dot: Callable[[np.ndarray], torch.Tensor]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Exact search of a float16 stored condition through the half product: its top ``2 k + HALF_SCAN_MARGIN``
        rows, scored in float32 (``dot``), whose ``k`` best are returned when no row left out can beat them: the
        ``k``-th float32 score exceeds the lowest half product taken by more than the product's error bound
        (:func:`~finesim.index.tri.half_product_bound`, taken at the lowest half product: every row left out has a
        half product at most that, so its float32 score is at most that plus the bound; stored condition embeddings
        are unit vectors, as finesim writes them). None otherwise (rows too close to tell apart in float16: the
        caller scans in float32)."""
        wanted = 2 * k + HALF_SCAN_MARGIN
        rows, halves = self._dot_scan(key, vector, wanted, mask)
        top_rows, top_scores = best_rows(dot(self._gather(rows, key)).numpy(), rows, k)
        if len(rows) < wanted:  # every row the mask keeps was taken
            return top_rows, top_scores
        lowest = float(halves[-1])  # best first: the lowest half product taken
        bound = half_product_bound(lowest, float(torch.linalg.vector_norm(vector)), row_norm=1.001)
        if len(top_scores) == k and float(top_scores[-1]) > lowest + bound:
            return top_rows, top_scores
        return None

    def _dot_scan(
        self,
        key: str,
        vector: torch.Tensor,
        wanted: int,
        mask: np.ndarray | None,
        row_scale: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)``: the ``wanted`` rows with the highest ``x . vector`` over every vector ``x`` of the
        stored array ``key`` (the first stage's, a stored condition's; times ``row_scale[row]`` when given), best first:
        :func:`~finesim.index.tri.candidate_dot`, split over :attr:`scan_threads` for a float32 index; a float16
        index's half product runs on torch's own threads (split, it was slower)."""
        split = not (self.store.dtype == "float16" and HALF_PRODUCT)
        score = functools.partial(candidate_dot, vector=vector)
        return self._exact(key, score, wanted, mask, row_scale, split=split)

    def _borrowed_map(self, condition: str, key: str) -> ConditionMap | None:
        """The held map (fitting this index's size and map options) of the condition nearest to ``condition``: the
        highest cosine between the model's embeddings of the two condition texts alone (each text embedded once and
        kept); None when no other condition's map is held or the nearest lies below ``map_borrow_min_cosine``. A
        near condition's map ranked closer to ``condition``'s own map than the unmapped vectors do; an unrelated
        condition's ranked worse (benchmarks/two_stage_borrowed_map.py)."""
        if self.embedder.encoder != "bi":  # a text alone has an embedding in a bi-encoder only
            return None
        options = self._map_options()
        with self._lock:
            held = {k: (self._map_conditions[k], m) for k, m in self._maps.items()
                    if k != key and k in self._map_conditions and m.fits(len(self), *options)}  # fmt: skip
        if not held:
            return None
        texts = [condition, *dict.fromkeys(text for text, _ in held.values())]
        with self._lock:  # a local copy: another search may prune the kept vectors meanwhile
            vectors = {t: self._condition_vectors[t] for t in texts if t in self._condition_vectors}
        missing = [t for t in texts if t not in vectors]
        if missing:
            vectors.update(zip(missing, self.embedder.plain(missing)))  # unit rows
        with self._lock:
            for text in texts:
                self._condition_vectors[text] = vectors[text]
                self._condition_vectors.move_to_end(text)
            while len(self._condition_vectors) > 4 * MAP_CONDITIONS:
                self._condition_vectors.popitem(last=False)
        cosine = {k: float(vectors[text] @ vectors[condition]) for k, (text, _) in held.items()}
        nearest = max(cosine, key=cosine.__getitem__)
        if cosine[nearest] < self.map_borrow_min_cosine:  # a distant condition's map ranks worse than none
            return None
        logger.debug("condition %r borrows the map of %r (cosine %.3f) while its own is fitted", condition,
                     held[nearest][0], cosine[nearest])  # fmt: skip
        return held[nearest][1]

    def _map_options(self) -> tuple[int, float]:
        """``(map_sample, map_ridge)``, checked."""
        return _count(self.map_sample, "map_sample must be a whole number >= 1"), float(self.map_ridge)

    def _map_or_fit_later(self, condition: str, key: str) -> ConditionMap | None:
        """``map_wait`` False: the condition's map when it is ready, else None, with a background thread fitting it
        (one per condition, at most ``MAP_PENDING`` at a time: a condition beyond them is answered meanwhile and
        queued by a later query; the threads read a saved map at once and fit one at a time). A fit that failed
        raises its error here, on the next query of its condition."""
        options = self._map_options()  # a bad option is the caller's error, raised now
        with self._lock:
            held = self._maps.get(key)
            if held is not None and held.fits(len(self), *options):
                self._maps.move_to_end(key)
                return held
            error = self._map_errors.pop(key, None)
            if error is not None:
                raise error
            for done in [k for k, t in self._map_threads.items() if not t.is_alive()]:
                del self._map_threads[done]  # finished: a later query of its condition may start another
            if key not in self._map_threads and len(self._map_threads) < MAP_PENDING:

                def fit() -> None:
                    try:
                        self._condition_map(condition, key, in_background=True)
                    except Exception as err:  # handed to the next query of the condition
                        with self._lock:
                            self._map_errors[key] = err
                        logger.warning("fitting the map of condition %r failed: %s", condition, err)

                thread = threading.Thread(target=fit, name=f"finesim-map-{key[:12]}", daemon=True)
                self._map_threads[key] = thread
                thread.start()
        return None

    def wait_for_maps(self, timeout: float | None = None) -> bool:
        """Wait for the maps being fitted in the background (``map_wait`` False), at most ``timeout`` seconds in
        all; whether none is still running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            threads = list(self._map_threads.values())
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)

    def _conditioned_rows(self, key: str, condition: str, rows: np.ndarray) -> np.ndarray:
        """The embeddings of corpus ``rows`` under ``condition`` (in that order): from the re-ranking cache, the
        others embedded now and kept there."""
        cached, missing = self.rerank_cache.lookup(key, rows)
        if missing:
            embedded = self.embedder.conditioned(self.store.texts(missing), condition)
            self.rerank_cache.store(key, missing, embedded)
            cached.update(zip(missing, embedded))
        return np.stack([cached[int(r)] for r in rows]) if len(rows) else np.zeros((0, self.store.dim), np.float32)

    def _condition_map(self, condition: str, key: str, in_background: bool = False) -> ConditionMap:
        """The condition's :class:`~finesim.index.two_stage.ConditionMap`, fitted on first use (``map_sample``
        corpus texts embedded under the condition, through the re-ranking cache, and one pass over the first-stage
        vectors) and kept for later queries, in memory and in the index folder (``maps/``, read by later processes:
        a command line search, a restarted server); fitted again when the index has grown or ``map_sample`` /
        ``map_ridge`` changed. A fit holds a lock of its condition only: searches under other conditions go on. A fit
        logs what it does and, unless ``in_background``, shows a progress bar when ``show_progress`` is on."""
        with self._lock:
            fitting = self._map_locks.setdefault(key, threading.Lock())
        acquired = fitting.acquire(blocking=False)
        try:
            if not acquired:
                with self._traffic.aside():  # a search waiting for a background fit of this map must not hold it off
                    fitting.acquire()
                    acquired = True
            store, (sample, ridge) = self.store, self._map_options()  # one snapshot: an add() replaces self.store
            count, parts = store.count, list(store.parts)
            with self._lock:
                held = self._maps.get(key)
                if held is not None and held.fits(count, sample, ridge):
                    self._maps.move_to_end(key)
                    return held
            spec = self.first_stage_spec
            assert spec is not None
            file = store.root / MAPS / map_file_name(key, count, sample, ridge, [p.id for p in parts])
            fitted = load_condition_map(file, count, sample, ridge, spec.dim)
            if fitted is None:
                # background fits take turns (a saved map above is read without waiting for another's fit)
                with self._background_fit_turn if in_background else contextlib.nullcontext():
                    fitted = self._fit_condition_map(condition, key, parts, sample, ridge, in_background)
                self._save_map(file, fitted)
            with self._lock:
                self._maps[key] = fitted
                self._map_conditions[key] = condition
                self._maps.move_to_end(key)
                while len(self._maps) > MAP_CONDITIONS:
                    self._map_conditions.pop(self._maps.popitem(last=False)[0], None)
            return fitted
        finally:
            if acquired:
                fitting.release()

    def _save_map(self, file: Path, fitted: ConditionMap) -> None:
        """Keep a fitted map in the index folder for later processes (best effort: a read-only folder or a full disk
        costs a fit per process, not the search). Maps of fewer rows are removed by the next ``add``; those of
        another sample size or ridge stay beside it (another process may use them)."""
        try:
            save_condition_map(file, fitted)
        except OSError as err:
            logger.warning("could not keep the fitted map in %s (it is fitted again next time): %s", file, err)

    def _fit_condition_map(
        self, condition: str, key: str, parts: list[Part], sample: int, ridge: float, in_background: bool = False
    ) -> ConditionMap:
        """Fit the condition's map over the rows of ``parts`` (see :meth:`_condition_map`). The sample is embedded a
        batch at a time, so that other searches get the model between batches; a fit in the background also waits
        before each step for a moment when no search runs (:attr:`map_fit_yield`)."""
        count = parts[-1].stop if parts else 0
        rows = map_sample_rows(count, sample)
        plain = self._gather(rows, FIRST_STAGE)
        step = self.map_fit_batch if in_background else max(1, int(self.embedder.batch_size))
        waited = 0.0

        def gap() -> None:  # a fit in the background lets running searches go first (map_fit_yield)
            nonlocal waited
            if in_background:
                waited += self._traffic.wait_for_gap(self.map_fit_yield)

        logger.info(
            "fitting the map of condition %r: %d sample texts under it (embedded, or read from the re-ranking cache), "
            "then one pass over %d first-stage vectors (kept for later queries)", condition, len(rows), count,
        )  # fmt: skip
        under = []
        bar = _progress(len(rows), f"map for condition {condition[:40]!r}", self.show_progress and not in_background)
        with bar:
            for i in range(0, len(rows), step):
                gap()
                under.append(self._conditioned_rows(key, condition, rows[i : i + step]))
                bar.update(len(under[-1]))
        conditioned = np.concatenate(under) if under else np.zeros((0, plain.shape[1]), dtype=np.float32)
        weights = fit_condition_map(plain, conditioned, ridge)
        mapping = torch.from_numpy(weights)
        inverse = np.zeros(count, dtype=np.float32)
        for part in parts:  # the stored rows as the scan reads them (not re-normalised)
            array = self._array(part, FIRST_STAGE)
            for start in range(0, min(part.count, count - part.start), SCORE_CHUNK):
                stop = min(start + SCORE_CHUNK, part.count, count - part.start)
                gap()
                block = self._check_finite(np.asarray(array[start:stop], dtype=np.float32), part, FIRST_STAGE,
                                           np.arange(start, stop))  # fmt: skip
                norms = torch.linalg.vector_norm(as_float_tensor(block) @ mapping, dim=1).numpy()
                inverse[part.start + start : part.start + stop] = 1.0 / np.maximum(norms, 1e-12)
        if waited >= 0.1:
            logger.info("the map of condition %r waited %.1f s in all for gaps between searches", condition, waited)
        return ConditionMap(weights, inverse, count, rows, ridge)

    def _mapped_rows(
        self, fitted: ConditionMap, query_vector: torch.Tensor, wanted: int, kind: str | None, mask: np.ndarray | None
    ) -> np.ndarray:
        """The ``"mapped"`` first stage's ``wanted`` candidates: the rows whose mapped first-stage vectors have the
        highest cosine with the query's conditioned embedding. Exact: every row scored; approximate (``kind``): the
        faiss index of the first-stage vectors gives the ``MAP_POOL x wanted`` rows with the highest unscaled score
        ``x . W q`` (faiss's inner product), which the per-row scale then re-ranks."""
        vector = _finite_query(torch.from_numpy(fitted.query_vector(query_vector.numpy())))
        if kind is None:
            return self._dot_scan(FIRST_STAGE, vector, wanted, mask, fitted.inverse_norms)[0]
        pool = _keep(self._ann_for_first_stage(kind).search(vector.numpy(), MAP_POOL * wanted), mask)
        pool = pool[pool < fitted.count]  # rows added since the map was fitted wait for the next query's map
        scores = (as_float_tensor(self._gather(pool, FIRST_STAGE)) @ vector).numpy() * fitted.inverse_norms[pool]
        return best_rows(scores, pool, wanted)[0]

    def _mapped_unit_rows(self, fitted: ConditionMap, rows: np.ndarray) -> np.ndarray:
        """The mapped first-stage vectors of ``rows`` at unit length, ``x W / ||x W||``: their cosine with the query
        is the ``mapped`` ranking's score (computed in torch, as the map's other products)."""
        mapped = as_float_tensor(self._gather(rows, FIRST_STAGE)) @ torch.as_tensor(fitted.weights)
        return (mapped * torch.as_tensor(fitted.inverse_norms[np.asarray(rows, dtype=np.int64)])[:, None]).numpy()

    def _ann_for_first_stage(self, kind: str) -> AnnFile:
        """The approximate index over the first-stage vectors, loaded, built or extended to cover every row."""
        spec = self.first_stage_spec
        assert spec is not None
        return self._ann(f"{FIRST_STAGE}-{kind}", kind, FIRST_STAGE, spec.dim, {"first_stage": spec.to_manifest()})

    def _exact(
        self,
        key: str | None,
        score: Any,
        k: int,
        mask: np.ndarray | None = None,
        row_scale: np.ndarray | None = None,
        split: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` of ``score(block)`` over the stored array ``key`` (:meth:`_array`), chunk by chunk, each
        row's score multiplied by ``row_scale[row]`` when given (rows beyond it, added since it was computed, are
        left out); only the rows ``mask`` keeps compete. A non-finite score is a damaged file (:meth:`_damaged`).

        ``split`` (for a ``score`` that is one matrix-vector product, which torch runs on one thread): the chunks are
        split into :attr:`scan_threads` contiguous runs scored side by side, each keeping its own top ``k``, merged
        at the end: the same chunks and the same tie-break by row as one run, so the same result. Other scores (the
        plain cosine, a tri-encoder's head) run as one run: their split was not measured."""
        steps = []  # (part, array, start, stop) of every chunk, in row order
        for part in self.store.parts:
            array = self._array(part, key)
            end = part.count if row_scale is None else max(0, min(part.count, len(row_scale) - part.start))
            steps += [(part, array, start, min(start + SCORE_CHUNK, end)) for start in range(0, end, SCORE_CHUNK)]

        def scan(run: list[tuple[Part, np.ndarray, int, int]]) -> tuple[np.ndarray, np.ndarray]:
            best = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)  # (rows, scores) of the top k so far
            for part, array, start, stop in run:
                scores = score(array[start:stop]).numpy()
                if row_scale is not None:
                    scores = scores * row_scale[part.start + start : part.start + stop]
                if not np.isfinite(scores).all():
                    bad = start + int(np.flatnonzero(~np.isfinite(scores))[0])
                    if np.isfinite(np.asarray(array[bad], dtype=np.float32)).all():
                        raise ValueError(
                            f"the score of row {part.start + bad} is NaN or infinite though its stored vector is "
                            "finite: the model's query or condition embedding is at fault"
                        )
                    raise self._damaged(part, key, bad)
                rows = np.arange(part.start + start, part.start + stop)
                if mask is not None:
                    keep = mask[part.start + start : part.start + stop]
                    scores, rows = scores[keep], rows[keep]
                best = best_rows(np.concatenate([best[1], scores]), np.concatenate([best[0], rows]), k)
            return best

        workers = min(self.scan_threads or torch.get_num_threads(), len(steps)) if split else 1
        if workers <= 1:
            return scan(steps)
        runs = [[steps[i] for i in run] for run in np.array_split(np.arange(len(steps)), workers)]
        with ThreadPoolExecutor(workers, thread_name_prefix="finesim-scan") as pool:
            found = list(pool.map(scan, runs))  # in order: a damaged row raises as in one run (the lowest run's)
        return best_rows(np.concatenate([s for _, s in found]), np.concatenate([r for r, _ in found]), k)

    def _file(self, part: Part, key: str | None) -> Path:
        """The file of the stored array ``key`` (see :meth:`_array`) of a part."""
        if key is None or key == FIRST_STAGE:
            return self.store.part_dir(part) / f"{key or SENTENCES}.npy"
        return self.store.condition_file(key, part)

    def _damaged(self, part: Part, key: str | None, row: int) -> IndexFormatError:
        """The error for a NaN or infinite value in row ``row`` (of the part) of a stored array."""
        fix = (
            "delete it to compute it again"
            if key not in (None, FIRST_STAGE)
            else "the index is damaged: build it again"
        )
        return IndexFormatError(
            self._file(part, key),
            f"row {row} holds NaN or infinite values ({fix}; `finesim index info --verify`, in Python "
            "index.store.verify_hashes(), checks every file)",
        )

    def _check_finite(self, block: np.ndarray, part: Part, key: str | None, rows: np.ndarray) -> np.ndarray:
        """``block`` (the rows ``rows`` of a part's stored array ``key``) when every value is finite."""
        finite = np.isfinite(block).all(axis=-1)
        if not finite.all():
            raise self._damaged(part, key, int(rows[np.flatnonzero(~finite)[0]]))
        return block

    # ------------------------------------------------------------------ approximate search

    def _approximate_kind(self, approximate: bool | str) -> str | None:
        if approximate is False or approximate is None:
            return None
        if approximate is True:
            default = self.store.manifest.get("approximate") or {}
            return str(default.get("kind", "hnsw"))
        if approximate not in ANN_KINDS:
            raise ValueError(f"approximate must be True, False or one of {list(ANN_KINDS)}, got {approximate!r}")
        return str(approximate)

    def _ann_for(self, condition: str | None, kind: str) -> AnnFile:
        """The approximate index for ``condition`` (None: the tri-encoder's stage vectors), loaded, built or
        extended so that it covers every row."""
        key = None if condition is None else self._ensure_condition(condition)
        name = f"{SENTENCES}-{kind}" if key is None else f"condition-{key}-{kind}"
        extra = {"model_sha256": self.store.manifest["model"]["sha256"], "condition": condition}
        return self._ann(name, kind, key, self.store.dim, extra)

    def _ann(self, name: str, kind: str, key: str | None, dim: int, extra: dict[str, Any]) -> AnnFile:
        """The faiss index ``name`` over the arrays of ``key`` (see :meth:`_array`), covering every row."""
        default = self.store.manifest.get("approximate") or {}
        params = default.get("params") if default.get("kind") == kind else None
        with self._lock:
            building = self._ann_locks.setdefault(name, threading.Lock())
        with building:  # loading or building a faiss index (minutes at a million rows) holds this name's lock only
            with self._lock:
                ann = self._anns.get(name)
            if ann is None:
                ann = AnnFile(self.store.root / ANN, name, kind, params or {})
                ann.load()
                with self._lock:
                    self._anns[name] = ann
            if ann.count != len(self):
                ann.update(len(self), dim, lambda a, b: self._blocks(key, a, b), self._sampler(key), extra)
        return ann

    def _array(self, part: Part, key: str | None) -> np.ndarray:
        if key is None or key == FIRST_STAGE:
            return self.store.array(part, key or SENTENCES)
        array = self.store.condition_array(key, part)
        if array is None:
            raise NotEmbeddedError(f"part {part.id} has no embeddings under the condition {key} (an add committed it)")
        return array

    def _blocks(self, key: str | None, start: int, stop: int) -> Iterator[np.ndarray]:
        """Normalised float32 rows ``start .. stop - 1`` in blocks (each checked to be finite)."""
        for part in self.store.parts:
            lo, hi = max(start, part.start), min(stop, part.stop)
            for a in range(lo, hi, SCORE_CHUNK):
                b = min(a + SCORE_CHUNK, hi)
                block = np.asarray(self._array(part, key)[a - part.start : b - part.start], dtype=np.float32)
                yield normalized(self._check_finite(block, part, key, np.arange(a, b) - part.start))

    def _sampler(self, key: str | None) -> Any:
        def sample(m: int) -> np.ndarray:
            n = len(self)
            rows = np.arange(n) if m >= n else np.sort(np.random.default_rng(0).choice(n, m, replace=False))
            return normalized(self._gather(rows, key))

        return sample

    def _gather(self, rows: np.ndarray, key: str | None) -> np.ndarray:
        """The stored vectors of global ``rows`` (in that order)."""
        rows = np.asarray(rows, dtype=np.int64)
        dim = self.first_stage_spec.dim if key == FIRST_STAGE and self.first_stage_spec else self.store.dim
        out = np.zeros((len(rows), dim), dtype=np.float32)
        for part in self.store.parts:
            mask = (rows >= part.start) & (rows < part.stop)
            if mask.any():
                local = rows[mask] - part.start
                order = np.argsort(local, kind="stable")
                block = np.asarray(self._array(part, key)[local[order]], dtype=np.float32)
                self._check_finite(block, part, key, local[order])
                placed = np.empty_like(block)
                placed[order] = block
                out[mask] = placed
        return out

    def recall(
        self,
        queries: Sequence[str],
        conditions: Sequence[str | None] | str | None,
        k: int = 10,
        *,
        approximate: bool | str = True,
        candidates: int | None = None,
        strategy: str = "auto",
    ) -> dict[str, Any]:
        """Recall@k of approximate (or two-stage) search against exact search over (query, condition) pairs: the
        mean share of the exact top-k that the approximate top-k finds, and each query's. ``strategy="two-stage"``
        measures two-stage search (with ``approximate=False`` its first stage is exact). ``conditions`` None (or a
        None among them) measures a search without a condition (exact strategy, approximate only). Each measured
        search runs as its condition's first: the pairs earlier searches re-ranked are set aside for it
        (:meth:`~finesim.index.two_stage.RerankCache.pairs_set_aside`), so the figure does not depend on what was
        searched before, and the measured searches add none."""
        queries = _text_list(queries, "queries")
        k, candidates = _whole(k, "k"), None if candidates is None else _whole(candidates, "candidates")
        if conditions is None or isinstance(conditions, str):
            conds: list[str | None] = [conditions] * len(queries)
        else:
            conds = list(conditions)
        if len(conds) != len(queries):
            raise ValueError(f"{len(queries)} queries but {len(conds)} conditions")
        per_query, measured = [], set()
        for query, condition in zip(queries, conds):
            # resolved before the exact reference, which stores the condition's embeddings (so "auto" would then
            # resolve to exact search and measure exact against exact)
            resolved = "exact" if self.encoder == "tri" or condition is None else self._strategy(strategy, condition)
            measured.add(resolved)
            exact, _ = self.search_rows(query, condition, k, strategy="exact")
            with self.rerank_cache.pairs_set_aside():
                found, _ = self.search_rows(
                    query, condition, k, approximate=approximate, candidates=candidates, strategy=resolved
                )
            per_query.append(recall_at_k(exact, found, k))
        return {
            "k": k,
            "approximate": self._approximate_kind(approximate),
            "candidates": candidates,
            "strategy": "/".join(sorted(measured)) or strategy,
            "queries": len(per_query),
            "recall": float(np.mean(per_query)) if per_query else float("nan"),
            "per_query": per_query,
        }

    # ------------------------------------------------------------------ description

    def info(self) -> dict[str, Any]:
        """The manifest's description, the stored conditions and approximate indexes, and the size on disk."""
        return self.store.describe()


# ---------------------------------------------------------------------- writing parts


def _reduced_half_sums() -> bool:
    """Whether torch may sum float16 products in reduced precision on CPU (a process setting, off by default): the
    certified float16 exact search assumes float32 sums, so it is skipped then."""
    getter = getattr(torch._C, "_get_cpu_allow_fp16_reduced_precision_reduction", None)
    return bool(getter()) if getter is not None else False


def prepare_new_folder(folder: Path, *, make: bool = True) -> None:
    """Refuse a folder that holds an index or anything else; an absent or empty folder (or one holding only a
    crashed build's leftovers) is fine, and made unless ``make`` is False."""
    if (folder / MANIFEST).exists():
        raise FileExistsError(
            f"{folder} already holds an index ({MANIFEST}): add to it (`finesim index add`; in Python "
            "ConditionalIndex.open(folder).add(texts)), or choose another folder"
        )
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"{folder} is a file; the index needs a folder")
    if folder.is_dir():
        others = sorted(
            p.name
            for p in folder.iterdir()  # a killed writer's temporary manifest goes with its leftovers, under the lock
            if p.name not in (PARTS, CONDITIONS, ANN, LOCK) and not TEMP_PID.match(p.name)
        )
        if others:
            raise FileExistsError(f"{folder} is not empty ({', '.join(others[:5])}): choose a new or empty folder")
    if make:
        folder.mkdir(parents=True, exist_ok=True)
        return
    parent = next(p for p in [folder, *folder.parents] if p.exists())  # where it will be made: checked now
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"{folder}: cannot make the index folder here ({parent} is not a writable folder)")


def local_batches(
    encoder: IndexEncoder,
    texts: list[str],
    keys: dict[str, str],
    first_stage: FirstStageEncoder | None = None,
    meta: list[dict[str, Any]] | None = None,
) -> Iterator[Batch]:
    """Embed ``texts`` in this process, chunk by chunk: stage vectors (tri), first-stage vectors (bi / CASE with a
    first stage) and one array per condition key; ``meta`` rows ride along."""
    for start in range(0, len(texts), ENCODE_CHUNK):
        chunk = texts[start : start + ENCODE_CHUNK]
        arrays: dict[str, np.ndarray] = {}
        if encoder.encoder == "tri":
            arrays[SENTENCES] = encoder.stage(chunk)
        if first_stage is not None:
            arrays[FIRST_STAGE] = first_stage.corpus(chunk)
        for key, condition in keys.items():
            arrays[key] = encoder.conditioned(chunk, condition)
        yield Batch(chunk, arrays, None if meta is None else meta[start : start + ENCODE_CHUNK])


def write_part(
    root: Path,
    manifest: dict[str, Any],
    count: int,
    batches: Iterable[Batch],
    keys: dict[str, str],
    *,
    show_progress: bool = False,
    label: str = "indexing",
) -> dict[str, Any]:
    """Write a new part of ``count`` rows from ``batches`` (and its embeddings under the conditions ``keys``);
    returns its manifest entry. Nothing is visible to readers until the caller commits the manifest. ``label``:
    the progress bar's."""
    dim, dtype = int(manifest["dims"]["index"]), str(manifest["dtype"])
    part_arrays = part_array_shapes(manifest)
    part_id = new_part_id(len(manifest["parts"]))
    part = Part(part_id, 0, count)
    fields = manifest.get("fields") or {}
    with_meta = bool(fields.get("id") or fields.get("metadata"))
    writer = PartWriter(root, part_id, count, part_arrays, meta=with_meta)
    store = IndexStore(root, manifest)
    conditions: dict[str, ArrayWriter] = {}
    try:
        for key in keys:  # one at a time: a failed allocation (a full disk) aborts the ones already made
            conditions[key] = ArrayWriter(store.condition_file(key, part), count, dim, dtype)
        start = 0
        with _progress(count, label, show_progress) as bar:
            for batch in batches:
                if start + len(batch.texts) > count:
                    raise ValueError(f"more than the {count} rows expected")
                writer.write_texts(batch.texts)
                if with_meta:
                    if batch.meta is None or len(batch.meta) != len(batch.texts):
                        raise ValueError("a block without the IDs / metadata of its rows")
                    writer.write_meta(batch.meta)
                missing = set(part_arrays) - set(batch.arrays)
                if missing:
                    raise ValueError(f"a block without its {sorted(missing)} vectors")
                for name, rows in batch.arrays.items():
                    width = part_arrays[name][0] if name in part_arrays else dim
                    if rows.shape != (len(batch.texts), width):
                        raise ValueError(f"{name}: a {rows.shape} block for {len(batch.texts)} texts of width {width}")
                    if name in part_arrays:
                        writer.write_rows(name, start, rows)
                    else:
                        conditions[name].write_rows(start, rows)
                start += len(batch.texts)
                bar.update(len(batch.texts))
        if start != count:
            raise ValueError(f"{start} rows written, {count} expected")
        entry = writer.finish()
        for array in conditions.values():
            array.finish()
    except BaseException:
        writer.abort()
        for array in conditions.values():
            array.abort()
        raise
    return entry


def part_array_shapes(manifest: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """The arrays every part of an index holds, name -> (width, dtype): the tri-encoder's stage vectors, the
    first-stage vectors of two-stage search."""
    dim, dtype = int(manifest["dims"]["index"]), str(manifest["dtype"])
    out: dict[str, tuple[int, str]] = {}
    if manifest["encoder"]["type"] == "tri":
        out[SENTENCES] = (dim, dtype)
    if manifest.get("first_stage"):
        out[FIRST_STAGE] = (int(manifest["first_stage"]["dim"]), dtype)
    return out
