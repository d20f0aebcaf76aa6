"""``POST /search``: the index a server searches, opened once with the model the server has loaded.

:func:`open_served_index` runs in the model-loading thread, after the model: it checks that the index was built for
the same encoder type, opens it with the served model object (so the model is loaded once and
:meth:`~finesim.index.ConditionalIndex.open` compares its weights hash with the one the index records), and embeds
the corpus for the start-up conditions of a bi-encoder or CASE index. Any failure stops the server with one error
line naming the index folder. The searches themselves run on the batching worker
(:class:`~finesim.serving.engine.SearchJob`); a new condition's map (a "mapped" index) is fitted before its search,
in a thread that takes turns with the worker at the model lock (:class:`~finesim.models.lock.ModelLock`), or, with
``map_wait`` off, in the index's own background thread (the same lock) while its searches are answered meanwhile.

The index is a :class:`ServedIndex`: a damaged file met during a search (NaN or infinite vectors, a file gone) is an
:class:`~finesim.index.IndexFormatError` naming the file relative to the index folder, so the 500 answer does not
show the server's paths (the server's log has the full traceback).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from finesim.evaluation.ensemble import ENSEMBLE
from finesim.index import ConditionalIndex, IndexFormatError
from finesim.index.two_stage import takes_feedback
from finesim.serving.errors import ApiError
from finesim.serving.settings import ServeSettings

logger = logging.getLogger("finesim.serving")

NO_INDEX_MESSAGE = "no index is loaded: start the server with --index DIR (an index built with this model) to search"


class IndexOpenError(RuntimeError):
    """The server's ``--index`` could not be opened with its model; the message names the folder."""


class ServedIndex(ConditionalIndex):
    """A :class:`~finesim.index.ConditionalIndex` whose search errors about its files name them relative to the
    index folder (a client sees ``conditions/<key>/<part>.npy: row 3 holds NaN ...``, not the server's path)."""

    def search(
        self,
        query: str,
        condition: str | None,
        k: int = 10,
        *,
        where: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> list[dict[str, Any]]:
        with self._files_named_relative():
            return super().search(query, condition, k, where=where, **options)

    def map_needed(self, condition: str) -> bool:
        with self._files_named_relative():
            return super().map_needed(condition)

    def prepare_map(self, condition: str) -> bool:
        with self._files_named_relative():
            return super().prepare_map(condition)

    @contextmanager
    def _files_named_relative(self) -> Iterator[None]:
        try:
            yield
        except IndexFormatError as err:
            raise err.relative_to(self.store.root) from None
        except OSError as err:  # a file removed or unreadable since the index was opened
            name = IndexFormatError(err.filename or "a file", err.strerror or "unreadable").relative_to(self.store.root)
            raise name from None


def _as_encoder(model: str, encoder: str) -> str:
    """`` (or this model with --encoder E)`` when ``model`` has no finesim marker (its type is then the flag's), else
    nothing: a finesim model is loaded as the type it was saved as."""
    from finesim.models.hub import resolve_model_path
    from finesim.models.io import saved_encoder

    try:
        marked = saved_encoder(resolve_model_path(model)) is not None
    except (OSError, ValueError):  # unresolvable here, or a damaged marker: say nothing of --encoder
        return ""
    return "" if marked else f" (or this model with --encoder {encoder})"


def open_served_index(settings: ServeSettings, scorer: Any, model_lock: Any = None) -> Any:
    """The :class:`~finesim.index.ConditionalIndex` at ``settings.index``, opened with ``scorer``'s model and the
    scoring engine's ``model_lock`` (:class:`~finesim.models.lock.ModelLock`).

    Raises:
        IndexOpenError: the folder is not a valid index, was built for another encoder type or with another
            model (the weights hash differs), or its start-up conditions could not be embedded.
    """
    from finesim.index.encoders import LoadedModel
    from finesim.index.store import IndexStore

    path = str(settings.index)
    try:
        if scorer.encoder == ENSEMBLE:
            raise ValueError(
                f"{settings.model} is an ensemble, which scores pairs but embeds nothing to search with; serve the "
                "member the index was built with"
            )
        manifest = IndexStore.open(path).manifest
        encoder = str(manifest["encoder"]["type"])
        if encoder != scorer.encoder:
            built = manifest["model"].get("name") or "a model object"
            raise ValueError(
                f"it holds {encoder}-encoder embeddings (built with {built}) but the server scores with "
                f"{settings.model} as a {scorer.encoder}-encoder: build the index with the served model, or serve "
                f"the model the index was built with{_as_encoder(settings.model, encoder)}"
            )
        loaded = LoadedModel(scorer.model, encoder, settings.model, None)
        index = ServedIndex.open(
            path, model=loaded, device=settings.device, batch_size=settings.inference_batch_size,
            model_lock=model_lock, first_stage=settings.first_stage,
        )  # fmt: skip
        index.first_stage()  # another first-stage model: loaded and checked before the port opens, not on a search
        index.map_wait = settings.map_wait
        index.map_borrow = settings.map_borrow
        if settings.map_fit_yield is not None:
            index.map_fit_yield = settings.map_fit_yield
        if settings.rerank_depth is not None:
            index.rerank_depth = settings.rerank_depth  # parsed and checked by the index when set
        if settings.rerank_feedback is not None:
            index.rerank_feedback = settings.rerank_feedback  # parsed and checked by the index when set
        if settings.index_conditions and index.encoder == "tri":
            logger.warning(
                "--conditions: %d condition(s) not embedded: a tri-encoder index embeds its corpus once, for every "
                "condition",
                len(settings.index_conditions),
            )
        elif settings.index_conditions:
            index.show_progress = settings.progress  # an hour a condition at a million texts: say how far it is
            index.prepare(list(settings.index_conditions))
            index.show_progress = False
    except (ValueError, OSError) as err:
        message = " ".join(str(err).split())
        raise IndexOpenError(f"the index {path} cannot be served: {message}") from err
    return index


def checked_where(index: Any, where: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``where`` of a ``/search`` body, checked against the served index before the search is queued: a 422
    (a client's mistake, not a server failure) for an index without metadata or a key no row has."""
    if not where:
        return None
    if not index.store.fields["metadata"]:
        raise ApiError(422, "where: the served index has no metadata to filter on")
    keys = index.store.metadata_keys()
    for key in where:
        if key not in keys:
            raise ApiError(422, f"where: no row has the metadata key {key!r}; the keys are: {', '.join(keys)}")
    return dict(where)


def checked_plain(index: Any) -> None:
    """A ``/search`` without a condition, checked against the served index before the search is queued: a 422 saying
    why an index that cannot search without a condition cannot (:meth:`ConditionalIndex.plain_search_refusal`)."""
    refusal = index.plain_search_refusal()
    if refusal is not None:
        raise ApiError(422, f'the served index cannot search without a condition: {refusal}; send "condition"')


def describe_index(index: Any) -> dict[str, Any]:
    """What ``/info`` says about the served index (no stored condition texts: ``/info`` needs no API key, and
    the conditions a bi-encoder index stores are those clients have searched). ``first_stage`` and
    ``first_stage_query`` are the first stage's model and query mode (``conditioned``, ``plain``, ``tri`` or
    ``mapped``), both None without one. ``plain_search``: whether a ``/search`` without a condition is answered.
    ``map_wait`` (a "mapped" index; else None): whether a new condition's first search waits for its map's fit;
    ``map_borrow`` (likewise): whether, not waiting, it may rank with the map of the nearest condition held;
    ``map_fit_yield`` (a "mapped" index that does not wait; else None): the seconds a background fit waits before each
    step for a gap between searches.
    ``rerank_depth`` (an index with a first stage; else None): ``"all"`` or ``"FIRST,STEP,PATIENCE"``.
    ``rerank_feedback`` (a ``self`` first stage, ``conditioned`` or ``mapped``; else None): ``"none"`` or
    ``"local-map:ROUNDS,RIDGE,POOL[,earlier|own]"``."""
    manifest = index.store.manifest
    stage = index.first_stage_spec
    feedback = None  # only a "self" first stage with the conditioned or mapped query can have feedback
    if stage is not None and takes_feedback(stage.model, stage.query):
        feedback = "none" if index.rerank_feedback is None else str(index.rerank_feedback)
    return {
        "path": str(index.store.root),
        "encoder": index.encoder,
        "count": len(index),
        "dimension": int(index.store.dim),
        "dtype": index.dtype,
        "built_with": manifest["model"].get("name"),
        "model_sha256": manifest["model"]["sha256"],
        # exact for a tri-encoder and for stored conditions; a new condition re-ranks the first stage's candidates
        "search": "auto" if stage is not None else "exact",
        "first_stage": None if stage is None else stage.model,
        "first_stage_query": None if stage is None else stage.query,
        "plain_search": index.plain_search_refusal() is None,
        "map_wait": bool(index.map_wait) if stage is not None and stage.query == "mapped" else None,
        "map_borrow": bool(index.map_borrow) if stage is not None and stage.query == "mapped" else None,
        "map_fit_yield": (
            float(index.map_fit_yield) if stage is not None and stage.query == "mapped" and not index.map_wait else None
        ),
        "rerank_depth": None if stage is None else "all" if index.rerank_depth is None else str(index.rerank_depth),
        "rerank_feedback": feedback,
        "ids": index.store.fields["id"],
        "metadata_keys": index.store.metadata_keys() if index.store.fields["metadata"] else [],
    }
