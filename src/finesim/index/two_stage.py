"""Two-stage conditional search for bi-encoder and CASE indexes: any condition, without embedding the corpus for it.

A bi-encoder or CASE model embeds ``(text, condition)`` together, so exact search under a new condition embeds the
whole corpus once (minutes at 100k texts). Two-stage search avoids that:

1. **First stage** (condition-independent, computed once at build): every corpus text has a *first-stage vector*,
   stored per part as ``first_stage.npy``. The ``N`` texts whose vectors are closest to the query's first-stage
   vector are the candidates (exactly, or with faiss when the index is approximate).
2. **Re-ranking**: the candidates are embedded under the condition by the index's own model and ranked by the exact
   conditional cosine the scorer gives. Their embeddings are kept in a per-condition cache in memory, so a later
   query under the same condition embeds only candidates not seen before.

A result's score is therefore exact; only the candidate set is approximate (recall@k against exact search is what
``ConditionalIndex.recall(..., strategy="two-stage")`` and ``benchmarks/two_stage_search.py`` measure).

The first stage is a :class:`FirstStageSpec`:

- ``model``: ``"self"`` (a bi-encoder's own embedding of the text alone; the default for bi-encoder indexes), the
  name of another sentence-transformers model (any index kind, CASE included), which embeds the texts alone, or a
  finesim **tri-encoder** folder (e.g. a student distilled from the bi-encoder, docs/search.md "A distilled first
  stage"), whose first stage is already conditional.
- ``query``: how the query's first stage is formed: ``"conditioned"`` (the model's embedding of the
  ``(query, condition)`` pair, searched against the unconditioned corpus vectors; the default for ``"self"``),
  ``"mapped"`` (``"self"`` only: the same query vector, searched against the corpus vectors *mapped under the
  condition* by a linear map fitted per condition, :class:`ConditionMap`),
  ``"plain"`` (the query alone; the default for another model) or ``"tri"`` (the only mode of a tri-encoder, and
  its default): the stored vectors are the tri-encoder's condition-independent stage vectors
  (:mod:`finesim.index.tri`, as a tri-encoder index stores them) and the candidates are the tri-encoder's own top
  ``N`` under the condition, its head applied: exactly the ranking a tri-encoder index of the same corpus gives
  (``ConditionalIndex._tri_rows``, the code both searches run), exact or through faiss.
  ``benchmarks/two_stage_search.py`` measures each mode's recall against exact search.

A bi-encoder's ``"self"`` first-stage vectors are also what a search without a condition ranks
(``ConditionalIndex.search(query, None)``; :func:`plain_search_refusal` says which indexes cannot).
"""

from __future__ import annotations

import hashlib
import json
import numbers
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from finesim.index.moments import PairMoments

FIRST_STAGE = "first_stage"  # the array name of the first-stage vectors in a part
SELF = "self"
TRI = "tri"  # the query mode of a tri-encoder first stage: its own top N under the condition
MAPPED = "mapped"  # a self first stage whose corpus vectors are mapped under the condition (ConditionMap)


def takes_feedback(model: str | None, query: str | None) -> bool:
    """Whether a first stage (its model and query mode, as the manifest records them) can take local-map feedback
    (finesim.index.feedback): the bi-encoder's own vectors ("self") ranked by the conditioned query or a map; a
    "plain" query ranks in another space than the re-ranker's embeddings, another model's vectors too."""
    return model == "self" and query in ("conditioned", MAPPED)


BORROWED = "borrowed"  # what a mapped first stage ranked with: the map of the nearest condition held (map_borrow)
# the least cosine between two condition texts' embeddings for one to borrow the other's map. On six never-seen C-STS
# validation conditions (benchmarks/results/two_stage_borrowed_map.json) the nearest donors of large pools (cosine
# 0.48-0.94) lifted recall@10 above the "conditioned" first stage's for 6 of 6 conditions at N = 100 and 200 (4-5 of 6
# at N = 50); the farthest (-0.14 to 0.01) for 0-1 of 6. 0.3 was set after seeing those, before the index's own picks
# among 16 held maps were measured: there every donor it took (0.41-0.64) lifted recall or left it level, and the
# nearest held conditions it refused lay at 0.12-0.29 (not measured as donors)
MAP_BORROW_MIN_COSINE = 0.3
QUERY_MODES = ("conditioned", "plain", TRI, MAPPED)
STRATEGIES = ("auto", "exact", "two-stage")
# candidates re-ranked per query (benchmarks/results/two_stage_search.json: recall@10 against exact search per N)
DEFAULT_CANDIDATES = 200
CACHE_ROWS = 262_144  # embeddings kept in memory over all conditions (1 GiB at width 1024, 384 MiB at 384)
# the "mapped" first stage: corpus texts embedded under a new condition to fit its map, and the ridge toward the
# identity; chosen on C-STS train conditions (benchmarks/results/two_stage_map_selection.json), never on the
# validation conditions the two-stage benchmark reports
MAP_SAMPLE = 2048
MAP_RIDGE = 0.1
MAP_FORMAT = 1  # a saved map's format and fit: changing either makes older files another map (fitted again)
# map_wait False: new conditions whose maps wait for a background fit at once (more are answered meanwhile, borrowed or
# conditioned, without queuing a fit: a later query of theirs queues it), so many new conditions at once cannot pile up
# fits that each take the model for 2048 encodes, wanted or not
MAP_PENDING = 4
# texts a background fit embeds per model call: each call holds the model lock, which a search's own calls wait for.
# At 1M texts a never-seen condition's searches during its fit took 1,749 ms p50 with batches of 64 (the encoder's,
# as before) and 877 ms with 16, the fit slightly longer (16-18 s against 15-16 s;
# benchmarks/results/two_stage_during_fit_1m.json, one run; 16 picked after a scratch check of 16 against 64 on four
# of those conditions, no other value tried). A fit in the foreground (map_wait True) keeps the encoder's batch size
MAP_FIT_BATCH = 16
# seconds a background fit waits, before each of its steps (a batch of its sample, a chunk of its pass over the
# first-stage vectors), for a moment when no search runs (finesim.index.traffic): searches keep the model and the cores
# while the fit yields, and the bound keeps a steady stream of searches from holding the fit off for ever (at 1M texts
# and the default sample, 128 batches and 62 chunks: at worst about 3 minutes per fit under searches back to back, and
# fits run one at a time, so the last of MAP_PENDING new conditions may wait several times that).
# 0: no waiting (the fit's steps take turns with the searches' model calls, as before). At 1M texts a never-seen
# condition's searches during its fit took 415 ms p50 waiting up to 1 s against 813 ms not waiting, the fits about as
# long (benchmarks/results/two_stage_fit_yield_1m.json; 1 s is the only bound tried)
MAP_FIT_YIELD = 1.0
MAP_FIT_YIELD_MAX = 60.0  # the longest wait per step accepted: a fit must still end under a steady stream of searches


def check_map_fit_yield(value: Any) -> float:
    """``value`` as ``map_fit_yield`` seconds (a real number from 0 to :data:`MAP_FIT_YIELD_MAX`), else ValueError
    saying what is accepted."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= float(value) <= MAP_FIT_YIELD_MAX:
        raise ValueError(f"map_fit_yield must be a number of seconds from 0 to {MAP_FIT_YIELD_MAX:g}, got {value!r}")
    return float(value)


MAP_CONDITIONS = 16  # fitted maps kept in memory (least recently used dropped first): a map is d x d plus n floats
# an approximate "mapped" first stage takes MAP_POOL x N faiss candidates, re-ranked by the map (not tuned: its
# coverage of the exact mapped first stage's candidates is in two_stage_search_mapped.json)
MAP_POOL = 10


@dataclass(frozen=True)
class FirstStageSpec:
    """What an index's first stage is (recorded in the manifest as ``first_stage``).

    Attributes:
        model: ``"self"`` or another model's name. query: ``"conditioned"``, ``"plain"``, ``"tri"`` or
        ``"mapped"``. dim: vector
        width. sha256: the other model's weights hash (None for ``"self"``). resolved: its resolved path, if a
        folder. head: a tri-encoder first stage's head kind (``hadamard``, ``concat``, ``hypernet``), else None.
        inputs_sha256: the other model's tokenizer and prompts hashes
        (:func:`~finesim.evaluation.fingerprint.model_inputs_fingerprint`; None for ``"self"`` and for an index
        built before they were recorded: then not checked).
    """

    model: str
    query: str
    dim: int
    sha256: str | None = None
    resolved: str | None = None
    head: str | None = None
    inputs_sha256: dict[str, str] | None = None

    def to_manifest(self) -> dict[str, Any]:
        out = asdict(self)
        for optional in ("head", "inputs_sha256"):  # only when there is one: other manifests stay as they were
            if out[optional] is None:
                del out[optional]
        return out

    def holds_plain_embeddings(
        self, encoder: str, model_sha256: str, model_inputs: dict[str, str] | None = None
    ) -> bool:
        """Whether the stored first-stage vectors are the index model's own embeddings of the texts alone (what a
        search without a condition ranks): ``"self"``, or another name for the same bi-encoder (same weights hash,
        and the same tokenizer and prompts where both record them); never a tri-encoder's stage vectors."""
        from finesim.evaluation.fingerprint import inputs_differences

        if self.query == TRI or encoder != "bi":
            return False
        if self.model == SELF:
            return True
        return self.sha256 == model_sha256 and not inputs_differences(self.inputs_sha256, model_inputs)

    @classmethod
    def from_manifest(cls, entry: dict[str, Any] | None) -> FirstStageSpec | None:
        if not entry:
            return None
        return cls(
            model=str(entry["model"]),
            query=str(entry["query"]),
            dim=int(entry["dim"]),
            sha256=entry.get("sha256"),
            resolved=entry.get("resolved"),
            head=entry.get("head"),
            inputs_sha256=entry.get("inputs_sha256"),
        )


def is_tri_encoder(model: Any) -> bool:
    """Whether ``model`` is a finesim tri-encoder: a folder whose marker says so, or a tri-encoder's checkpoint
    whose modules name the condition head (read without loading the model), or a loaded model with a
    ``ConditionHead``."""
    if isinstance(model, (str, Path)):
        from finesim.models.hub import ModelResolutionError, resolve_model_path
        from finesim.models.io import saved_encoder

        try:
            path = resolve_model_path(str(model))
        except ModelResolutionError:
            return False  # loading it says why it cannot be found
        return saved_encoder(path) == TRI
    from finesim.models.condition_head import find_condition_head

    return find_condition_head(model) is not None


def resolve_first_stage(encoder: str, first_stage: str | None, query: str | None) -> tuple[str | None, str]:
    """``(model, query)`` for an index of encoder type ``encoder``: ``first_stage`` ``"auto"`` is ``"self"`` for a
    bi-encoder and none otherwise; ``query`` None picks the default of the model (see the module docstring): ``"tri"``
    for a tri-encoder folder (read from its marker), the only mode it can serve; a mode the model cannot serve is an
    error, and so is a ``query`` given for an index that gets no first stage (it would be ignored)."""
    asked = query not in (None, "auto")
    if encoder == "tri" or first_stage in (None, "none", False):
        if encoder == "tri" and first_stage not in (None, "none", False, "auto"):
            raise ValueError("a tri-encoder index needs no first stage: its corpus vectors are condition-independent")
        if asked:
            why = "a tri-encoder index has none" if encoder == "tri" else "first_stage is none"
            raise ValueError(f"first-stage query {query!r} needs a first stage, and {why}: drop the query mode")
        return None, "plain"
    if first_stage == "auto":
        first_stage = SELF if encoder == "bi" else None
        if first_stage is None:
            if asked:
                raise ValueError(
                    f"first-stage query {query!r} needs a first stage, and a {encoder} index has none unless named: "
                    "name one (first_stage=MODEL, --first-stage MODEL), or drop the query mode"
                )
            return None, "plain"
    if first_stage == SELF and encoder != "bi":
        raise ValueError(
            f"first_stage='self' needs a bi-encoder (a {encoder} model has no embedding of a text alone): name a "
            "sentence-transformers model for the first stage instead, e.g. first_stage='minilm'"
        )
    if query is not None and query != "auto" and query not in QUERY_MODES:
        raise ValueError(f"first-stage query must be one of {list(QUERY_MODES)}, got {query!r}")
    if first_stage == SELF:
        if query == TRI:
            raise ValueError(
                "first-stage query 'tri' needs a tri-encoder first stage (first_stage=PATH of a finesim tri-encoder "
                "folder); 'self' is the index's own bi-encoder: use 'conditioned', 'mapped' or 'plain'"
            )
        return SELF, "conditioned" if query in (None, "auto") else query
    return str(first_stage), other_model_query(first_stage, query)


def other_model_query(model: Any, query: str | None) -> str:
    """The query mode of another first-stage ``model`` (not ``"self"``): ``query`` checked, or when None its
    default, ``"tri"`` for a finesim tri-encoder (read from its folder's marker) and ``"plain"`` otherwise."""
    if query is not None and query != "auto" and query not in QUERY_MODES:
        raise ValueError(f"first-stage query must be one of {list(QUERY_MODES)}, got {query!r}")
    tri = is_tri_encoder(model)
    if query is None or query == "auto":
        return TRI if tri else "plain"
    if query == MAPPED:
        raise ValueError(
            f"first-stage query 'mapped' fits a map from the index model's own embedding of a text to its embedding "
            f"under the condition, so it needs first_stage='self' (a bi-encoder's own first stage), not {model}"
        )
    if query == TRI and not tri:
        if isinstance(model, (str, Path)):
            from finesim.models.hub import resolve_model_path

            resolve_model_path(model)  # a folder that does not exist is said as such (ModelResolutionError)
        raise ValueError(
            f"first-stage query 'tri' needs a finesim tri-encoder folder (its finesim_model.json says encoder tri), "
            f"but {model} is not one: name a tri-encoder (e.g. a distilled student), or use query 'plain'"
        )
    if query != TRI and tri:
        raise ValueError(
            f"{model} is a tri-encoder: as a first stage it ranks the corpus with its condition head (query "
            f"'tri', the default for it); query {query!r} needs a model that embeds a text alone"
        )
    return query


def plain_search_refusal(manifest: dict[str, Any]) -> str | None:
    """Why the index of ``manifest`` cannot search without a condition, with what to do (None: it can); read from
    the manifest alone, so the command line refuses before loading the model.

    A search without a condition ranks the model's own embeddings of the texts alone and reads them from the index,
    never embedding the corpus: a bi-encoder index needs its ``"self"`` first-stage vectors (or a first stage of the
    same weights); a tri-encoder index's stage vectors are those embeddings only for a ``hadamard`` or ``hypernet``
    head without ``transform`` (:mod:`finesim.index.tri`); a CASE model embeds a text only with a condition."""
    encoder = manifest["encoder"]
    if encoder["type"] == TRI:
        head = encoder["head"]
        if head["kind"] != "concat" and not head["transform"]:
            return None
        stored = (
            "the concat head's sentence half W_s T(s)"
            if head["kind"] == "concat"
            else "the head's sentence transform T(s)"
        )
        return (
            f"this tri-encoder index stores {stored} of each text, not the sentence encoder's embedding of the "
            "text alone, so it cannot rank by the plain similarity (only a hadamard or hypernet head without "
            "transform stores those): search with a condition, or index the corpus with a bi-encoder (e.g. the "
            "tri-encoder's backbone) to search without one"
        )
    spec = FirstStageSpec.from_manifest(manifest.get("first_stage"))
    model = manifest["model"]
    if spec is not None and spec.holds_plain_embeddings(encoder["type"], model["sha256"], model.get("inputs_sha256")):
        return None
    other = "" if spec is None else f"; the stored first-stage vectors are another model's ({spec.model})"
    if encoder["type"] == "case":
        return (
            "a CASE model embeds a text only together with a condition, so it has no similarity of the texts "
            f"alone{other}: search with a condition, or index the corpus with a bi-encoder to search without one"
        )
    if spec is None:
        return (
            "this bi-encoder index stores no embeddings of the texts alone (built with first_stage=None, "
            "`--first-stage none`): build it again with first_stage='self' (the default for a bi-encoder), whose "
            "first-stage vectors a search without a condition ranks"
        )
    return (
        f"a search without a condition ranks the bi-encoder's own embeddings of the texts alone{other}, "
        f"{'a tri-encoder ranking with its head' if spec.query == TRI else 'not this model'}: build the index "
        "again with first_stage='self' (the default for a bi-encoder), or search with a condition"
    )


class FirstStageEncoder:
    """Embed corpus texts and queries for the first stage.

    Args:
        index_encoder: the index's :class:`~finesim.index.encoders.IndexEncoder` (used for ``"self"``).
        spec_model: ``"self"`` or a model (a name, or a loaded bi- or tri-encoder). query: ``"conditioned"``,
            ``"plain"`` or ``"tri"`` (``spec_model`` must then be a tri-encoder).
    """

    def __init__(self, index_encoder: Any, spec_model: Any, query: str, *, device: str | None = None) -> None:
        from finesim.index.encoders import IndexEncoder, load_index_model

        self.query_mode = query
        self.name: str = SELF
        self.sha256: str | None = None
        self.inputs_sha256: dict[str, str] | None = None
        self.resolved: str | None = None
        if isinstance(spec_model, str) and spec_model == SELF:
            if query == TRI:
                raise ValueError("first-stage query 'tri' needs a tri-encoder first-stage model, not 'self'")
            self.embedder = index_encoder
        else:
            from finesim.evaluation.fingerprint import model_fingerprint, model_inputs_fingerprint

            stage_encoder = TRI if query == TRI else "bi"
            if isinstance(spec_model, (str, Path)):
                from finesim.models.hub import resolve_model_path

                resolve_model_path(spec_model)  # a folder that is gone is said as such, before what it should be
            if query == TRI and not is_tri_encoder(spec_model):
                raise ValueError(
                    f"first-stage query 'tri' needs a finesim tri-encoder, but {spec_model} is not one (no tri-encoder "
                    "marker, no ConditionHead)"
                )
            loaded = load_index_model(spec_model, stage_encoder, device)
            self.name = loaded.name or type(loaded.model).__name__
            self.resolved = loaded.resolved
            self.sha256 = model_fingerprint(loaded.model)
            self.inputs_sha256 = model_inputs_fingerprint(loaded.model)
            self.embedder = IndexEncoder(loaded.model, stage_encoder, batch_size=index_encoder.batch_size)

    @property
    def dim(self) -> int:
        if self.query_mode == TRI:
            return int(self.embedder.dim)  # the head's width: no probe needed
        probe = self.corpus(["a"])
        self.embedder.encoded -= 1  # a probe, not a corpus text
        return int(probe.shape[1])

    def spec(self) -> FirstStageSpec:
        head = self.embedder.head.kind if self.query_mode == TRI else None
        return FirstStageSpec(
            self.name, self.query_mode, self.dim, self.sha256, self.resolved, head, self.inputs_sha256
        )

    def corpus(self, texts: list[str]) -> np.ndarray:
        """The first-stage vectors of corpus texts (float32): L2-normalised embeddings of the texts alone, or for
        ``"tri"`` the tri-encoder's stage vectors (:meth:`~finesim.index.encoders.IndexEncoder.stage`)."""
        if self.query_mode == TRI:
            return self.embedder.stage(texts)
        return self.embedder.plain(texts)

    def query(self, query: str, condition: str) -> np.ndarray:
        """The query's first-stage vector (L2-normalised float32); ``"tri"`` uses :meth:`tri_query` instead."""
        if self.query_mode == TRI:
            raise ValueError("a tri-encoder first stage ranks with its head: use tri_query()")
        if self.query_mode in ("conditioned", MAPPED):
            return self.embedder.conditioned([query], condition)[0]
        return self.embedder.plain([query])[0]

    def tri_query(self, query: str, condition: str) -> Any:
        """``"tri"``: the tri-encoder's :class:`~finesim.index.tri.TriQuery` for (query, condition)."""
        if self.query_mode != TRI:
            raise ValueError(f"tri_query() is for a tri-encoder first stage, not query mode {self.query_mode!r}")
        return self.embedder.tri_query(query, condition)


def fit_condition_map(plain: np.ndarray, conditioned: np.ndarray, ridge: float = MAP_RIDGE) -> np.ndarray:
    """The linear map ``W`` (``d x d``, float32) that takes a text's embedding alone (a row of ``plain``) to its
    embedding under one condition (the same row of ``conditioned``): ridge regression toward the identity,
    ``W = I + B`` with ``B`` minimising ``||plain B - (conditioned - plain)||^2 + ridge ||B||^2``, i.e.
    ``B = (plain^T plain + ridge I)^-1 plain^T (conditioned - plain)``. With few rows (or a large ``ridge``) ``W``
    stays near the identity, where the ``"mapped"`` first stage is the ``"conditioned"`` one.

    With fewer rows than dimensions (a search's feedback rounds, finesim.index.feedback) the same ``B`` is computed
    in its dual form, ``plain^T (plain plain^T + ridge I)^-1 (conditioned - plain)``: a rows x rows solve.

    Computed with torch (float64), not numpy: a search's feedback rounds fit between model calls, and numpy's BLAS
    threads, left spinning after a product, slowed the next model call by up to 1.8x."""
    import torch

    from finesim.index.moments import map_from_moments  # torch, imported on use (not by the command line's parser)

    x = torch.as_tensor(np.ascontiguousarray(plain, dtype=np.float64))
    y = torch.as_tensor(np.ascontiguousarray(conditioned, dtype=np.float64))
    if x.ndim != 2 or x.shape != y.shape:
        raise ValueError(
            f"plain and conditioned must be matching (rows, d) arrays, got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    if not ridge > 0:
        raise ValueError(f"ridge must be > 0, got {ridge!r}")
    rows, dim = x.shape
    if rows < dim:  # the dual form (push-through identity): the same B from a rows x rows system
        gram = x @ x.T + ridge * torch.eye(rows, dtype=torch.float64)
        eye = torch.eye(dim, dtype=torch.float64)
        return (eye + x.T @ torch.linalg.solve(gram, y - x)).to(torch.float32).numpy()
    return map_from_moments(x.T @ x, x.T @ (y - x), ridge).to(torch.float32).numpy()


@dataclass(frozen=True)
class ConditionMap:
    """The ``"mapped"`` first stage of one condition: each text's first-stage vector ``x`` is mapped to ``x W``, a
    linear estimate of its embedding under the condition (:func:`fit_condition_map`, fitted on a sample of corpus
    texts embedded under the condition), and the candidates are the texts whose mapped vectors have the highest
    cosine with the ``(query, condition)`` embedding ``q``: ``(x W . q) / ||x W||``, i.e. ``x . (W q)`` scaled per row
    by ``inverse_norms``. Fitting it costs ``sample`` encodes and one pass over the first-stage vectors, once per
    condition (not the corpus pass of exact search).

    Attributes:
        weights: ``W`` (``d x d``). inverse_norms: ``1 / ||x W||`` per corpus row. count: the rows it covers (a map
        of a smaller index is fitted again). sample: the rows it was fitted on. ridge: the fit's ridge.
    """

    weights: np.ndarray
    inverse_norms: np.ndarray
    count: int
    sample: np.ndarray
    ridge: float

    def fits(self, count: int, sample: int, ridge: float) -> bool:
        """Whether this map is the one an index of ``count`` rows fits with ``sample`` texts and ``ridge``."""
        return self.count == count and len(self.sample) == min(sample, count) and self.ridge == ridge

    def query_vector(self, conditioned_query: np.ndarray) -> np.ndarray:
        """``W q``: the vector whose dot product with a text's first-stage vector is its unscaled mapped score (in
        torch, as :func:`fit_condition_map`: numpy's BLAS threads would slow the model call that follows)."""
        import torch

        query = torch.as_tensor(np.asarray(conditioned_query, dtype=np.float32))
        return (torch.as_tensor(self.weights) @ query).numpy()


def map_file_name(key: str, count: int, sample: int, ridge: float, part_ids: list[str]) -> str:
    """The file name of a condition's saved map (``maps/`` of the index folder): the condition key, then a digest of
    what the map depends on besides the model and condition (the key's): the rows (their count and the parts holding
    them), the sample size and the ridge."""
    what = json.dumps([MAP_FORMAT, count, sample, repr(float(ridge)), list(part_ids)]).encode()
    return f"{key}-{hashlib.sha256(what).hexdigest()[:16]}.npz"


def save_condition_map(path: Path, fitted: ConditionMap) -> None:
    """Write ``fitted`` to ``path`` (``.npz``) atomically."""
    from finesim.results import atomic_write

    def write(fh: Any) -> None:
        np.savez(
            fh,
            weights=fitted.weights,
            inverse_norms=fitted.inverse_norms,
            sample=fitted.sample,
            count=np.int64(fitted.count),
            ridge=np.float64(fitted.ridge),
        )

    atomic_write(path, write)


def load_condition_map(path: Path, count: int, sample: int, ridge: float, dim: int) -> ConditionMap | None:
    """The map saved at ``path`` when it is whole and is the one asked for (``count`` rows, ``sample`` texts,
    ``ridge``, width ``dim``, finite values); None otherwise (absent, damaged, or another's: fitted again)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            fitted = ConditionMap(
                np.asarray(data["weights"], dtype=np.float32),
                np.asarray(data["inverse_norms"], dtype=np.float32),
                int(data["count"].item()),
                np.asarray(data["sample"], dtype=np.int64).reshape(-1),
                float(data["ridge"].item()),
            )
        whole = fitted.weights.shape == (dim, dim) and fitted.inverse_norms.shape == (count,)
        finite = whole and bool(np.isfinite(fitted.weights).all() and np.isfinite(fitted.inverse_norms).all())
        return fitted if finite and fitted.fits(count, sample, ridge) else None
    except Exception:  # absent, damaged or not a map at all (a file is no reason to fail a search): fitted again
        return None


def map_sample_rows(count: int, size: int = MAP_SAMPLE) -> np.ndarray:
    """The corpus rows a condition's map is fitted on: ``size`` rows drawn without replacement with a fixed seed
    (every row when the corpus is smaller), sorted; the same rows for every condition of an index of ``count``
    rows, so their embeddings can come from the re-ranking cache."""
    if size >= count:
        return np.arange(count, dtype=np.int64)
    return np.sort(np.random.default_rng(0).choice(count, size, replace=False)).astype(np.int64)


class RerankCache:
    """Conditioned embeddings of corpus rows, per condition key, kept in memory (least recently used condition
    dropped first once ``max_rows`` embeddings are held), and ``moments``: the sums of the pairs local-map feedback
    re-ranked under each condition (:class:`~finesim.index.moments.PairMoments`, dropped with their condition; a
    condition alone over the limit loses its oldest rows but keeps its sums). Thread-safe."""

    def __init__(self, max_rows: int = CACHE_ROWS) -> None:
        from finesim.index.moments import PairMoments  # torch, imported on use (not by the command line's parser)

        self.max_rows = max_rows
        self.moments: PairMoments = PairMoments()
        self._rows: OrderedDict[str, dict[int, np.ndarray]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @contextmanager
    def pairs_set_aside(self) -> Iterator[None]:
        """Within the block, searches see no earlier pairs and the pairs they add are dropped after it: each runs as
        its condition's first (a measurement that must not depend on the searches before it). Not for a cache that
        other threads search meanwhile."""
        from finesim.index.moments import PairMoments

        held, self.moments = self.moments, PairMoments()
        try:
            yield
        finally:
            self.moments = held

    def lookup(self, key: str, rows: np.ndarray) -> tuple[dict[int, np.ndarray], list[int]]:
        """The cached vectors of ``rows`` under ``key`` and the rows that are not cached."""
        with self._lock:
            held = self._rows.get(key)
            if held is not None:
                self._rows.move_to_end(key)
            found = {int(r): held[int(r)] for r in rows if held is not None and int(r) in held}
            missing = [int(r) for r in rows if int(r) not in found]
            self.hits += len(found)
            self.misses += len(missing)
        return found, missing

    def store(self, key: str, rows: list[int], vectors: np.ndarray) -> None:
        """Keep ``vectors`` (one per row) under ``key``."""
        with self._lock:
            held = self._rows.setdefault(key, {})  # rows in insertion order (dicts keep it)
            self._rows.move_to_end(key)
            for row, vector in zip(rows, vectors):
                if row not in held:
                    held[row] = vector
                    self._held += 1
            while self._held > self.max_rows:
                if len(self._rows) > 1:  # the least recently used condition first
                    dropped_key, dropped = self._rows.popitem(last=False)
                    self._held -= len(dropped)
                    self.moments.drop(dropped_key)
                else:  # one condition alone over the limit: its oldest rows
                    del held[next(iter(held))]
                    self._held -= 1
