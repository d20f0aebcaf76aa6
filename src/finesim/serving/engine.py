"""What the batching worker computes for a micro-batch, through the scorer's own functions.

A micro-batch is a list of jobs (:class:`PairJob`: score pairs, :class:`EmbedJob`: embed texts) from different
requests. :class:`ScoringEngine` gathers the distinct inputs of all of them, looks each up in the LRU cache and
computes the missing ones in **one** model call:

- bi- and tri-encoders and CASE models: :meth:`ConditionalScorer.embed` on the distinct ``(text, condition)``
  inputs; a pair's score is :func:`~finesim.evaluation.scoring.cosine_scores` of its two rows, exactly as
  ``ConditionalScorer.score`` computes it;
- cross-encoders and ensembles: ``cross_scores`` (:meth:`ConditionalScorer.cross_scores`,
  :meth:`~finesim.evaluation.ensemble.EnsembleScorer.cross_scores`) on the distinct ``(s1, s2, condition)`` triples.

When the combined call fails, each job is run alone, so one bad request does not fail the others.

The batcher (:mod:`finesim.serving.batching`) may hand the engine a piece of a request (:func:`piece_of`) and put
the pieces' results back together (:func:`merge_results`); :meth:`ScoringEngine.item_tokens` is what its token
budget counts.

A :class:`SearchJob` (``POST /search``) is never combined: it runs alone, after the batch's other jobs, as
:meth:`finesim.index.ConditionalIndex.search` on the index opened with the same model object. One
:class:`ModelLock` keeps the model (and its tokenizer, which refuses concurrent use) to one call at a time: the
engine holds it for a batch's model work, the index for each of its model calls; the worker counts tokens for the
token budget with a copy of the tokenizer of its own, without the lock. A thread other
than the worker may so use the model too, taking turns with it in the order they asked: the server fits a new
condition's map for a "mapped" index that way (:meth:`~finesim.index.ConditionalIndex.prepare_map`), a batch of
texts at a time, while the worker goes on scoring.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Sequence
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from finesim.evaluation.ensemble import ENSEMBLE
from finesim.evaluation.scoring import ConditionalScorer, cosine_scores
from finesim.models.lock import ModelLock
from finesim.serving.cache import LRUCache
from finesim.serving.metrics import BatchStats


@dataclass(frozen=True)
class PairJob:
    """Score ``(sentences1[i], sentences2[i], conditions[i])`` rows (a condition may be None: no condition)."""

    sentences1: list[str]
    sentences2: list[str]
    conditions: list[str | None]

    @property
    def size(self) -> int:
        """Pairs in the job."""
        return len(self.sentences1)


@dataclass(frozen=True)
class EmbedJob:
    """Embed ``(texts[i], conditions[i])`` rows; the result also counts the tokens the model reads."""

    texts: list[str]
    conditions: list[str | None]

    @property
    def size(self) -> int:
        """Texts in the job."""
        return len(self.texts)


@dataclass(frozen=True)
class Embeddings:
    """The result of an :class:`EmbedJob`: one float32 row per text and the tokens the inputs take."""

    vectors: np.ndarray
    tokens: int


@dataclass(frozen=True)
class SearchAnswer:
    """A :class:`SearchJob`'s result: the results, and the first stage whose candidates were re-ranked (None: no
    two-stage search; :meth:`~finesim.index.ConditionalIndex.last_first_stage`)."""

    results: list[dict[str, Any]]
    first_stage: str | None


@dataclass(frozen=True)
class SearchJob:
    """Search the loaded index: the ``k`` corpus texts most similar to ``query`` under ``condition``."""

    query: str
    condition: str | None  # None: a search without a condition (ConditionalIndex.search(query, None))
    k: int
    where: dict[str, Any] | None = None  # metadata filter (ConditionalIndex.search's ``where``)

    @property
    def size(self) -> int:
        """One query."""
        return 1


ModelJob = PairJob | EmbedJob  # the jobs a micro-batch combines into one model call
Job = PairJob | EmbedJob | SearchJob


class ScoringEngine:
    """Runs micro-batches of jobs on one scorer with an LRU cache in front; used by one thread only.

    Args:
        scorer: the :class:`ConditionalScorer` (bi, tri, cross or CASE) or an ensemble of them.
        cache: the cache of embeddings keyed ``(text, condition)``, or of a cross-encoder's scores keyed
            ``(s1, s2, condition)``.
        index: the :class:`~finesim.index.ConditionalIndex` that :class:`SearchJob` s search (None: none).
        model_lock: the :class:`ModelLock` held for each batch's model work (default: a new one); give the index
            the same (``ConditionalIndex.open(model_lock=...)``).
    """

    def __init__(
        self, scorer: ConditionalScorer, cache: LRUCache, index: Any = None, model_lock: ModelLock | None = None
    ) -> None:
        self.scorer = scorer
        self.cache = cache
        self.index = index
        self.model_lock = model_lock if model_lock is not None else ModelLock()

    def run(self, jobs: Sequence[Job]) -> tuple[list[Any], BatchStats]:
        """Each job's result (scores array, :class:`Embeddings`, :class:`SearchAnswer`, or the exception it raised) and
        the batch's stats."""
        counts = _Counts()
        results: list[Any] = [None] * len(jobs)
        model_jobs: dict[int, ModelJob] = {i: job for i, job in enumerate(jobs) if not isinstance(job, SearchJob)}
        if model_jobs:
            with self.model_lock:
                combined = self._run_combined(list(model_jobs.values()), counts)
            for i, result in zip(model_jobs, combined):
                results[i] = result
        for i, job in enumerate(jobs):
            if isinstance(job, SearchJob):
                try:
                    results[i] = self._search(job, counts)
                except Exception as err:
                    results[i] = err
        stats = BatchStats(
            requests=len(jobs),
            items=sum(job.size for job in jobs),
            encoded=counts.encoded,
            model_calls=counts.calls,
            cache_hits=counts.hits,
            cache_misses=counts.misses,
        )
        return results, stats

    def _run_combined(self, jobs: Sequence[ModelJob], counts: _Counts) -> list[Any]:
        """The jobs' results from one combined call; if it fails, from each job alone."""
        if not jobs:
            return []
        try:
            return self._run(jobs, counts)
        except Exception as err:
            if len(jobs) == 1:
                return [err]
        results: list[Any] = []
        for job in jobs:
            try:
                results.extend(self._run([job], counts))
            except Exception as one:
                results.append(one)
        return results

    def _search(self, job: SearchJob, counts: _Counts) -> SearchAnswer:
        if self.index is None:
            raise ValueError("no index is loaded")
        before = self.index.embedder.encoded_by_this_thread()  # not a map fit's, in its own thread meanwhile
        try:
            results = self.index.search(job.query, job.condition, job.k, where=job.where)
            return SearchAnswer(results, self.index.last_first_stage())
        finally:
            encoded = self.index.embedder.encoded_by_this_thread() - before
            counts.calls += int(encoded > 0)  # a request refused before encoding did not call the model
            counts.encoded += encoded

    def _run(self, jobs: Sequence[ModelJob], counts: _Counts) -> list[Any]:
        if not self.scorer.embeds:
            return self._run_cross(jobs, counts)
        keys: list[tuple[str, str | None]] = []
        for job in jobs:
            if isinstance(job, PairJob):
                keys += [*zip(job.sentences1, job.conditions), *zip(job.sentences2, job.conditions)]
            else:
                keys += list(zip(job.texts, job.conditions))
        table = self._lookup(keys, counts, self._embed)
        out: list[Any] = []
        for job in jobs:
            if isinstance(job, PairJob):
                a = torch.stack([table[k] for k in zip(job.sentences1, job.conditions)])
                b = torch.stack([table[k] for k in zip(job.sentences2, job.conditions)])
                out.append(cosine_scores(a, b))
            else:
                rows = torch.stack([table[k] for k in zip(job.texts, job.conditions)])
                out.append(Embeddings(rows.numpy(), self.count_tokens(job.texts, job.conditions)))
        return out

    def _run_cross(self, jobs: Sequence[ModelJob], counts: _Counts) -> list[Any]:
        pair_jobs: list[PairJob] = []
        for job in jobs:
            if not isinstance(job, PairJob):
                raise ValueError(f"this model ({self.scorer.encoder}) has no embeddings of its own")
            pair_jobs.append(job)
        triples = [t for job in pair_jobs for t in zip(job.sentences1, job.sentences2, job.conditions)]
        table = self._lookup(triples, counts, self._cross)
        return [
            np.asarray([table[t] for t in zip(job.sentences1, job.sentences2, job.conditions)], dtype=np.float32)
            for job in pair_jobs
        ]

    def _lookup(self, keys: Sequence[Hashable], counts: _Counts, compute: Any) -> dict[Hashable, Any]:
        """Every distinct key's value: from the cache, the missing ones computed in one call and cached."""
        table: dict[Hashable, Any] = {}
        missing = []
        for key in dict.fromkeys(keys):
            value = self.cache.get(key)
            if value is None:
                missing.append(key)
            else:
                table[key] = value
        counts.hits += len(table)
        counts.misses += len(missing)
        if missing:
            values = compute(missing)
            counts.calls += 1
            counts.encoded += int(getattr(self.scorer, "last_encoded", len(missing)) or 0)
            for key, value in zip(missing, values):
                table[key] = value
                self.cache.put(key, value)
        return table

    def _embed(self, keys: list[tuple[str, str | None]]) -> list[torch.Tensor]:
        embeddings = self.scorer.embed([k[0] for k in keys], [k[1] for k in keys])
        if self.scorer.encoder == "case":  # the LRU cache bounds what is kept, not the encoder's own memory
            self.scorer.model.encoder.forget()
        return [row.clone() for row in embeddings]

    def _cross(self, triples: list[tuple[str, str, str | None]]) -> list[float]:
        scores = self.scorer.cross_scores([t[0] for t in triples], [t[1] for t in triples], [t[2] for t in triples])
        return [float(s) for s in scores]

    def count_tokens(self, texts: Sequence[str], conditions: Sequence[str | None]) -> int:
        """Tokens the model reads for these inputs (after truncation): the ``(text, condition)`` pair, or the text
        alone, for a bi-encoder; the conditional prompt (and the condition-only prompt when CASE subtracts it)
        for a CASE model (``/v1/embeddings``' usage; 0 for a model without a tokenizer)."""
        try:
            return sum(input_tokens(self.scorer, texts, conditions))
        except NoTokenizer:
            return 0

    def item_tokens(self, job: Job) -> list[int]:
        """What the token budget of a micro-batch counts: the tokens the model reads for each input of ``job``
        (:func:`job_tokens`); a search counts 0 (it runs alone after the batch)."""
        if isinstance(job, SearchJob):
            return [0]
        return job_tokens(self.scorer, job)  # with the worker's own copy of the tokenizer: no lock (_counting_copy)


class NoTokenizer(ValueError):
    """The model has no tokenizer to count tokens with."""


def job_tokens(scorer: Any, job: ModelJob) -> list[int]:
    """Tokens the model reads for each input of ``job``, after truncation to the model's limit: a text of an
    :class:`EmbedJob` as :func:`input_tokens` counts it; a pair of a :class:`PairJob` both its sides (each
    ``(sentence, condition)`` input), or for a cross-encoder its one ``(s1, s2 [SEP] c)`` input; for an ensemble
    the sum over its members (each reads the pair). Inputs repeated in a batch or found in the cache are counted
    all the same (an upper bound of what the model computes)."""
    if scorer.encoder == ENSEMBLE:
        members = [job_tokens(member, job) for member in scorer.members]
        return [sum(counts) for counts in zip(*members)]
    if isinstance(job, EmbedJob):
        return input_tokens(scorer, job.texts, job.conditions)
    if scorer.encoder == "cross":
        from finesim.models.builders import cross_second_text

        second = [cross_second_text(scorer.model, s2, c) for s2, c in zip(job.sentences2, job.conditions)]
        return _lengths(scorer.model, job.sentences1, second)
    left = input_tokens(scorer, job.sentences1, job.conditions)
    right = input_tokens(scorer, job.sentences2, job.conditions)
    return [a + b for a, b in zip(left, right)]


def input_tokens(scorer: Any, texts: Sequence[str], conditions: Sequence[str | None]) -> list[int]:
    """Tokens of each ``(text, condition)`` input of an embedding model: a bi-encoder's text pair (the text alone
    without a condition); a tri-encoder's text and condition, each encoded alone; a CASE model's conditional prompt
    (plus the condition-only prompt when it subtracts it)."""
    if scorer.encoder == "case":
        encoder = scorer.model.encoder
        counts = _lengths(encoder.pipeline, encoder.conditional_texts(list(texts), list(conditions)), None)
        if encoder.subtract_condition:
            alone = _lengths(encoder.pipeline, [encoder.prompt.unconditional(c) for c in conditions], None)
            counts = [a + b for a, b in zip(counts, alone)]
        return counts
    with_condition = [i for i, c in enumerate(conditions) if c is not None]
    given = [c for c in conditions if c is not None]  # the conditions of with_condition, in order
    if scorer.encoder == "tri":
        counts = _lengths(scorer.model, list(texts), None)
        for i, n in zip(with_condition, _lengths(scorer.model, given, None)):
            counts[i] += n
        return counts
    counts = [0] * len(texts)
    without = [i for i, c in enumerate(conditions) if c is None]
    for i, n in zip(without, _lengths(scorer.model, [texts[i] for i in without], None)):
        counts[i] = n
    for i, n in zip(with_condition, _lengths(scorer.model, [texts[i] for i in with_condition], given)):
        counts[i] = n
    return counts


_COUNTING_COPIES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_COUNTING_LOCK = threading.Lock()


def _counting_copy(model: Any) -> Any:
    """A copy of ``model``'s tokenizer for counting tokens (None without one), made once per model object. A fast
    tokenizer refuses concurrent use ("Already borrowed"), and the model's own may be encoding in another thread (a
    map fit's) while the worker counts the next requests' tokens; the copy spares the count a wait for the model
    lock. Only the worker counts (and the start-up check, before the worker runs)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return None
    with _COUNTING_LOCK:
        try:
            copy = _COUNTING_COPIES.get(model)
        except TypeError:  # not weakly referable: count with the model's own
            return tokenizer
        if copy is None or copy[0] is not tokenizer:
            copy = (tokenizer, deepcopy(tokenizer))
            _COUNTING_COPIES[model] = copy
        return copy[1]


def _lengths(model: Any, texts: Sequence[str], pairs: Sequence[str] | None) -> list[int]:
    """Token count of each text (or text pair), truncated as the model truncates."""
    if not texts:
        return []
    tokenizer = _counting_copy(model)
    if tokenizer is None:
        raise NoTokenizer(f"{type(model).__name__} has no tokenizer to count tokens with")
    limit = getattr(model, "max_seq_length", None)
    encoded = tokenizer(
        list(texts), None if pairs is None else list(pairs), truncation=limit is not None, max_length=limit
    )
    return [len(ids) for ids in encoded["input_ids"]]


def piece_of(job: Job, start: int, stop: int) -> Job:
    """Inputs ``start:stop`` of ``job`` as a job of its own (the job itself when that is all of it)."""
    if start == 0 and stop == job.size:
        return job
    if isinstance(job, PairJob):
        return PairJob(job.sentences1[start:stop], job.sentences2[start:stop], job.conditions[start:stop])
    if isinstance(job, EmbedJob):
        return EmbedJob(job.texts[start:stop], job.conditions[start:stop])
    raise ValueError(f"a {type(job).__name__} is not split")


def merge_results(parts: Sequence[Any]) -> Any:
    """One job's result from its pieces' results, in input order: scores concatenated, embeddings stacked (their
    token counts added)."""
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    if all(isinstance(p, Embeddings) for p in parts):
        return Embeddings(np.concatenate([p.vectors for p in parts]), sum(p.tokens for p in parts))
    raise TypeError(f"cannot merge the results {[type(p).__name__ for p in parts]} of a split job")


@dataclass
class _Counts:
    hits: int = 0
    misses: int = 0
    calls: int = 0
    encoded: int = 0
