"""The FastAPI application: routes, the model loaded in the background, and the middleware stack.

:func:`create_app` builds it from :class:`~finesim.serving.settings.ServeSettings`. The model is loaded in a
thread started at application startup, so ``GET /health`` answers 503 until it is ready; the scoring endpoints
answer 503 meanwhile too. With ``settings.index`` the same thread then opens the index with the loaded model
(:mod:`finesim.serving.search`). Once loaded, one :class:`~finesim.serving.batching.MicroBatcher` thread owns the
model: it runs the micro-batches and the index searches.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from finesim._version import __version__
from finesim.evaluation.ensemble import ENSEMBLE
from finesim.models.lock import ModelLock
from finesim.serving.batching import MicroBatcher, ShuttingDown
from finesim.serving.cache import LRUCache
from finesim.serving.engine import (
    Embeddings,
    EmbedJob,
    Job,
    NoTokenizer,
    PairJob,
    ScoringEngine,
    SearchAnswer,
    SearchJob,
)
from finesim.serving.errors import (
    BACKEND,
    NO_INDEX,
    UNHEALTHY,
    UNSUPPORTED,
    ApiError,
    error_body,
    install_error_handlers,
)
from finesim.serving.limits import (
    AuthMiddleware,
    BodySizeLimitMiddleware,
    CancelOnDisconnectMiddleware,
    ConcurrencyLimitMiddleware,
    MetricsMiddleware,
)
from finesim.serving.metrics import ServerMetrics
from finesim.serving.schemas import (
    EmbeddingsRequest,
    RerankRequest,
    SearchRequest,
    SimilarityRequest,
    body_fields,
    checked_condition,
    checked_dimensions,
    checked_texts,
    condition_required,
    invalid,
    missing_hints,
    require_condition,
    row_conditions,
)
from finesim.serving.search import NO_INDEX_MESSAGE, checked_plain, checked_where, describe_index, open_served_index
from finesim.serving.settings import ServeSettings
from finesim.serving.supervision import stop_with_supervisor

logger = logging.getLogger("finesim.serving")

PUBLIC_PATHS = ("/health", "/info", "/metrics")
SCORING_PATHS = ("/similarity", "/rerank", "/v1/embeddings", "/search")
MODELS_PATH = "/v1/models"
FIRST_STAGE_HEADER = "X-Finesim-First-Stage"  # /search: the first stage whose candidates were re-ranked
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/openapi.json")  # public while the docs page is on

NO_EMBEDDINGS = {
    "tri": "this model is a tri-encoder: it has no conditional embedding of its own. Its sentence embedding is "
    "computed without the condition, and the condition is fused with it (by its ConditionHead) only in pairwise "
    "scoring; use /similarity or /rerank",
    "cross": "this model is a cross-encoder: it has no embeddings. It reads both sentences and the condition "
    "together and outputs one score per pair; use /similarity or /rerank",
    ENSEMBLE: "this model is an ensemble: it averages its members' scores of each pair and has no embeddings of "
    "its own; use /similarity or /rerank",
}


class ModelState:
    """The model's life: ``loading``, then ``ready`` (with its scorer, batcher and index) or ``failed``.

    ``failed_stage`` says what failed: ``model`` (loading it) or ``index`` (opening ``--index`` with it)."""

    def __init__(self) -> None:
        self.status = "loading"
        self.error: str | None = None
        self.failed_stage: str | None = None
        self.scorer: Any = None
        self.batcher: MicroBatcher | None = None
        self.index: Any = None
        self.info: dict[str, Any] = {}
        self.index_info: dict[str, Any] = {}

    def failure(self) -> str:
        """What failed, in one line (after a failed start)."""
        if self.failed_stage == "index":
            return str(self.error)
        return f"the model failed to load: {self.error}"

    def ready(self) -> tuple[Any, MicroBatcher]:
        """The scorer and batcher, or a 503 ``Unhealthy`` error while loading or after a failed load."""
        if self.status == "ready" and self.batcher is not None:
            return self.scorer, self.batcher
        if self.status == "failed":
            raise ApiError(503, self.failure(), UNHEALTHY)
        raise ApiError(503, "the model is still loading", UNHEALTHY)


def default_loader(settings: ServeSettings) -> Callable[[], Any]:
    """Load ``settings.model`` as :func:`finesim.load_scorer` does (a folder by its marker, an ensemble folder as
    its :class:`~finesim.evaluation.ensemble.EnsembleScorer`; a Hub id or sentence-transformers folder as a
    bi-encoder unless ``settings.encoder`` says otherwise)."""

    def load() -> Any:
        from finesim.evaluation.loading import load_scorer

        return load_scorer(
            settings.model,
            encoder=settings.encoder,
            batch_size=settings.inference_batch_size,
            device=settings.device,
        )

    return load


def describe_model(scorer: Any, settings: ServeSettings) -> dict[str, Any]:
    """What ``/info`` says about the loaded model: encoder, resolved path, dimensions, maximum length (for an
    ensemble: its members and weights instead), what scores it (runtime and device), the torch threads and the
    versions of the packages that shape its scores."""
    import torch

    from finesim.evaluation.loading import describe_scorer
    from finesim.results import package_versions

    info: dict[str, Any] = {
        "encoder": scorer.encoder,
        "resolved_model": None,
        "scorer": describe_scorer(scorer),
        "torch_threads": torch.get_num_threads(),
        "versions": package_versions(),
    }
    try:
        from finesim.models.hub import model_location

        info["resolved_model"] = model_location(settings.model)  # the absolute folder, or the Hub id
    except Exception:  # a model object given by the caller has no name to resolve
        pass
    model: Any = getattr(scorer, "model", None)  # an ensemble has members instead
    embedding = sentence = max_length = None
    if scorer.encoder == ENSEMBLE:
        info.update(scorer.describe())
    elif scorer.encoder == "case":
        pipeline = model.encoder.pipeline
        sentence = model.encoder.description.get("dimension")
        embedding = model.projection.out_dim if model.projection is not None else sentence
        max_length = getattr(pipeline, "max_seq_length", None)
    elif scorer.encoder == "cross":
        max_length = getattr(model, "max_length", None)
    else:
        sentence = model.get_embedding_dimension()
        embedding = sentence if scorer.encoder == "bi" else None
        max_length = getattr(model, "max_seq_length", None)
    info.update(
        {
            "embedding_dimension": embedding,
            "sentence_embedding_dimension": sentence,
            "max_sequence_length": max_length,
            "embeddings_endpoint": scorer.encoder in ("bi", "case"),
            "condition_required": condition_required(scorer),
        }
    )
    return info


SETTINGS_ENV = "FINESIM_SERVE_SETTINGS"


def app_from_environment() -> FastAPI:
    """The application of one worker process of a multi-process server (``finesim serve --workers N``): the
    settings come from ``$FINESIM_SERVE_SETTINGS`` (:meth:`ServeSettings.to_environment`), the torch threads are
    set before the model loads."""
    settings = ServeSettings.from_environment(os.environ.pop(SETTINGS_ENV))  # not left to the worker's children
    stop_with_supervisor()
    set_threads(settings)
    pid = os.getpid()
    return create_app(settings, on_ready=lambda: logger.warning("worker %d: model ready", pid), load_at_startup=True)


def set_threads(settings: ServeSettings) -> None:
    """``torch.set_num_threads`` per :meth:`ServeSettings.worker_threads` (nothing when it is None)."""
    threads = settings.worker_threads()
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def create_app(
    settings: ServeSettings,
    *,
    loader: Callable[[], Any] | None = None,
    on_ready: Callable[[], None] | None = None,
    on_load_error: Callable[[BaseException], None] | None = None,
    load_at_startup: bool = False,
) -> FastAPI:
    """The server application for ``settings``.

    Args:
        settings: model, limits, batching, cache, API key.
        loader: returns the loaded :class:`~finesim.evaluation.scoring.ConditionalScorer` (default:
            :func:`default_loader`); it runs in a background thread started at application startup.
        on_ready, on_load_error: called from that thread once the model is ready, or when loading failed (a
            failure is logged at ERROR without ``on_load_error``; with it, at DEBUG only: the callback's owner
            reports it, as ``finesim serve`` does in its one error line).
        load_at_startup: load during the application's start-up instead (a failure fails the start-up), as each
            worker of ``finesim serve --workers N`` does.
    """
    state = ModelState()
    map_turn = threading.Lock()  # one map fit at a time (a "mapped" index's new conditions)
    metrics = ServerMetrics(SCORING_PATHS + PUBLIC_PATHS + (MODELS_PATH,))
    load = loader or default_loader(settings)
    docs = docs_enabled(settings)
    public = PUBLIC_PATHS + (DOCS_PATHS if docs else ())
    started = int(time.time())

    def load_in_background() -> None:
        index = None
        try:
            scorer = load()
            info = describe_model(scorer, settings)
            model_lock = ModelLock()  # the worker's and the index's (a map fit's thread too): one model call at a time
            if settings.index is not None:
                state.failed_stage = "index"
                index = open_served_index(settings, scorer, model_lock)
                state.index_info = describe_index(index)
            state.failed_stage = "model"
            engine = ScoringEngine(scorer, LRUCache(settings.cache_size), index=index, model_lock=model_lock)
            if settings.max_batch_tokens is not None:
                check_token_counting(engine)
            batcher = MicroBatcher(
                engine,
                max_items=settings.max_batch_inputs,
                max_tokens=settings.max_batch_tokens,
                max_requests=settings.max_batch_requests,
                max_wait_s=settings.batch_wait_ms / 1000.0,
                on_batch=metrics.observe_batch,
            ).start()
            metrics.queue_depth.set_function(batcher.queued)
        except BaseException as err:
            level = logging.ERROR if on_load_error is None else logging.DEBUG  # the callback's owner reports it
            if state.failed_stage == "index":
                state.status, state.error = "failed", str(err)
                logger.log(level, "%s", state.error, exc_info=level == logging.DEBUG)
            else:
                state.failed_stage = "model"
                state.status, state.error = "failed", f"{type(err).__name__}: {err}"
                logger.log(level, "could not load %s: %s", settings.model, state.error, exc_info=level == logging.DEBUG)
            if on_load_error is not None:
                on_load_error(err)
            return
        state.scorer, state.batcher, state.info, state.index = scorer, batcher, info, index
        state.failed_stage = None
        state.status = "ready"
        if on_ready is not None:
            on_ready()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if load_at_startup:  # a worker of a multi-process server: accept connections only with the model loaded
            await asyncio.to_thread(load_in_background)
            if state.status == "failed":
                raise RuntimeError(state.error)  # uvicorn exits with STARTUP_FAILURE; the supervisor stops
        else:
            threading.Thread(target=load_in_background, name="finesim-load", daemon=True).start()
        yield
        if state.batcher is not None:  # in-flight requests have finished: stop the worker
            await asyncio.to_thread(state.batcher.stop, 30.0)

    app = FastAPI(
        title="finesim",
        version=__version__,
        description="Conditional semantic textual similarity: score, rerank and embed under a condition.",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,  # the page's scripts come from a CDN: on by default on loopback only
        redoc_url=None,
    )
    app.state.model = state
    app.state.metrics = metrics
    app.state.settings = settings
    install_error_handlers(app, body_fields(), missing_hints())
    # added innermost first: the last one added sees each request first
    app.add_middleware(CancelOnDisconnectMiddleware)
    # the body is read (or timed out) before the request takes a scoring slot: limits.py's order
    app.add_middleware(ConcurrencyLimitMiddleware, limit=settings.max_concurrent, public_paths=public, metrics=metrics)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_request_bytes, timeout_s=settings.body_timeout_s)
    if settings.api_key is not None:
        app.add_middleware(AuthMiddleware, api_key=settings.api_key, public_paths=public)
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    limits = {"max_items": settings.max_items, "max_chars": settings.max_text_chars}

    async def run(batcher: MicroBatcher, job: Job) -> Any:
        try:
            return await asyncio.wrap_future(batcher.submit(job))
        except ShuttingDown:
            raise ApiError(503, "the server is shutting down", UNHEALTHY) from None
        except Exception as err:
            logger.exception("scoring failed")
            raise ApiError(500, f"the model failed on this request: {type(err).__name__}: {err}", BACKEND) from None

    async def prepare_map(index: Any, condition: str) -> None:
        """A new condition's map, fitted (or read from ``maps/``) before its first search in a thread of its own (a
        daemon: a server that stops does not wait for it), one fit at a time, taking turns with the worker at the
        model lock: this request waits for the fit, the others go on (the worker is not held for it). A fit whose
        client has gone still finishes: its map is kept for the next search."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if not done.done():  # the request may have been cancelled meanwhile
                done.set_result(None) if error is None else done.set_exception(error)

        def fit() -> None:
            error: BaseException | None = None
            try:
                if index.map_needed(condition):  # a map already held (the common case) waits for no other fit
                    with map_turn:
                        index.prepare_map(condition)  # checks again: a fit just ended may have made it
            except BaseException as err:
                error = err
            try:
                loop.call_soon_threadsafe(settle, error)
            except RuntimeError:  # the event loop has closed: the server stopped meanwhile
                pass

        threading.Thread(target=fit, name="finesim-map", daemon=True).start()
        try:
            await done
        except Exception as err:
            logger.error("fitting the map of condition %r failed", condition, exc_info=err)
            message = f"fitting the map of the condition failed: {type(err).__name__}: {err}"
            raise ApiError(500, message, BACKEND) from None

    @app.get("/health", responses={503: {"description": "loading, or the model failed to load"}})
    async def health() -> Any:
        """200 ``{"status": "ok"}`` once the model is loaded; 503 while it loads."""
        if state.status == "ready":
            return {"status": "ok"}
        message = "the model is still loading" if state.status == "loading" else state.failure()
        return JSONResponse(error_body(message, UNHEALTHY), status_code=503)

    @app.get("/info")
    async def info() -> dict[str, Any]:
        """The model as given and resolved, encoder type, dimensions, maximum length, version and limits."""
        return {
            "model": settings.model,
            "status": state.status,
            "encoder": settings.encoder,
            "resolved_model": None,
            "embedding_dimension": None,
            "sentence_embedding_dimension": None,
            "max_sequence_length": None,
            **state.info,
            "finesim_version": __version__,
            "limits": settings.limits(),
            "batching": {
                "max_batch_inputs": settings.max_batch_inputs,
                "inference_batch_size": settings.inference_batch_size,
                "max_batch_tokens": settings.max_batch_tokens,
                "max_batch_requests": settings.max_batch_requests,
                "batch_wait_ms": settings.batch_wait_ms,
                "cache_size": settings.cache_size,
            },
            "auth": settings.api_key is not None,
            "index": None if settings.index is None else {"path": settings.index, **state.index_info},
            "workers": settings.workers,
            "worker_pid": os.getpid(),
        }

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        """Prometheus text format."""
        content, content_type = metrics.exposition()
        return Response(content=content, media_type=content_type)

    def model_object() -> dict[str, Any]:
        return {"id": settings.model, "object": "model", "created": started, "owned_by": "finesim"}

    @app.get(MODELS_PATH)
    async def models() -> dict[str, Any]:
        """OpenAI-compatible list of models: the one this server serves (its ``id`` is ``--model`` as given)."""
        return {"object": "list", "data": [model_object()]}

    @app.get(MODELS_PATH + "/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        """OpenAI-compatible model lookup: the served model by its id; 404 for any other."""
        if model_id != settings.model:
            raise ApiError(404, f"no model {model_id!r} here: this server serves {settings.model!r}")
        return model_object()

    @app.post("/similarity")
    async def similarity(body: SimilarityRequest) -> dict[str, list[float]]:
        """One score per ``(sentence1[i], sentence2[i])`` under the condition (cosine for bi/tri/CASE, the
        regression output for a cross-encoder): what ``ConditionalScorer.similarity`` gives for the same rows."""
        scorer, batcher = state.ready()
        s1 = checked_texts(body.sentence1, "sentence1", **limits)
        s2 = checked_texts(body.sentence2, "sentence2", **limits)
        if len(s1) != len(s2):
            raise ApiError(422, f"{len(s1)} first sentences but {len(s2)} second sentences")
        conds = row_conditions(body.condition, len(s1), **limits)
        require_condition(scorer, conds, "scores pairs")
        scores = await run(batcher, PairJob(s1, s2, conds))
        metrics.items.labels(endpoint="/similarity").inc(len(s1))
        return {"scores": [float(x) for x in scores]}

    @app.post("/rerank")
    async def rerank(body: RerankRequest) -> list[dict[str, Any]]:
        """``texts`` ordered by their score with ``query`` under the condition, best first (``top_n`` of them)."""
        scorer, batcher = state.ready()
        query = checked_texts(body.query, "query", max_items=1, max_chars=settings.max_text_chars)[0]
        texts = checked_texts(body.texts, "texts", **limits)
        condition = checked_condition(body.condition, "condition", max_chars=settings.max_text_chars)
        conds = [condition] * len(texts)
        require_condition(scorer, conds, "scores pairs")
        scores = await run(batcher, PairJob([query] * len(texts), texts, conds))
        metrics.items.labels(endpoint="/rerank").inc(len(texts))
        order = sorted(range(len(texts)), key=lambda i: (-float(scores[i]), i))
        return [{"index": i, "score": float(scores[i])} for i in order[: body.top_n]]

    @app.post("/search")
    async def search(body: SearchRequest, response: Response) -> list[dict[str, Any]]:
        """The ``k`` texts of the served index most similar to ``query`` under ``condition`` (without one when it is
        an explicit null; left out, a 422), best first: ``[{"index", "text", "score"}, ...]``, what
        ``ConditionalIndex.search(query, condition, k)`` returns. A two-stage search says which first stage found
        its candidates in the header ``X-Finesim-First-Stage`` (for a ``mapped`` index whose map is still being
        fitted, ``--no-map-wait``: ``borrowed``, the map of the nearest condition it holds, or ``conditioned`` when
        it holds none near enough or with ``--no-map-borrow``); without one (exact, tri-encoder, no condition)
        there is none."""
        if settings.index is None:
            raise ApiError(404, NO_INDEX_MESSAGE, NO_INDEX)
        _, batcher = state.ready()
        query = checked_texts(body.query, "query", max_items=1, max_chars=settings.max_text_chars)[0]
        # a string, or None when the body says "condition": null (a body without the field fails its parsing)
        condition = checked_condition(body.condition, "condition", max_chars=settings.max_text_chars)
        if condition is None:
            checked_plain(state.index)
        if body.k > settings.max_items:
            raise invalid(f"k is {body.k}; the server returns at most {settings.max_items} results per request")
        where = checked_where(state.index, body.where)
        if condition is not None and settings.map_wait and maps_conditions(state.index):
            await prepare_map(state.index, condition)  # without map_wait, the index fits it in its own thread
        answer: SearchAnswer = await run(batcher, SearchJob(query, condition, body.k, where))
        if answer.first_stage is not None:
            response.headers[FIRST_STAGE_HEADER] = answer.first_stage
        metrics.items.labels(endpoint="/search").inc(1)
        return answer.results

    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingsRequest) -> dict[str, Any]:
        """OpenAI-compatible embeddings: a bi-encoder's embedding of ``(text, condition)`` (the text alone without
        a condition), a CASE model's condition-aware projection (condition required). Strings only (token ids are a
        422 saying how to configure the client); ``dimensions`` only as the model's own dimension."""
        scorer, batcher = state.ready()
        if scorer.encoder in NO_EMBEDDINGS:
            raise ApiError(400, NO_EMBEDDINGS[scorer.encoder], UNSUPPORTED)
        texts = checked_texts(body.input, "input", **limits)
        condition = checked_condition(body.condition, "condition", max_chars=settings.max_text_chars)
        checked_dimensions(body.dimensions, state.info.get("embedding_dimension"))
        conds = [condition] * len(texts)
        require_condition(scorer, conds, "embeds texts")
        result: Embeddings = await run(batcher, EmbedJob(texts, conds))
        metrics.items.labels(endpoint="/v1/embeddings").inc(len(texts))
        data = [
            {"object": "embedding", "index": i, "embedding": _encode_vector(row, body.encoding_format)}
            for i, row in enumerate(result.vectors)
        ]
        usage = {"prompt_tokens": result.tokens, "total_tokens": result.tokens}
        return {"object": "list", "data": data, "model": settings.model, "usage": usage}

    return app


def maps_conditions(index: Any) -> bool:
    """Whether ``index`` has a "mapped" first stage, whose searches under a new condition fit its map first (read from
    the manifest: no file is touched on the event loop; :meth:`~finesim.index.ConditionalIndex.map_needed` runs in
    the fitting thread)."""
    spec = getattr(index, "first_stage_spec", None)
    return spec is not None and spec.query == "mapped" and index.encoder != "tri"


def check_token_counting(engine: ScoringEngine) -> None:
    """Fail the start (with the reason) when the token budget cannot count this model's tokens."""
    try:
        engine.item_tokens(PairJob(["a"], ["b"], ["c"]))
    except NoTokenizer as err:
        raise ValueError(
            f"max_batch_tokens (--max-batch-tokens) counts tokens with the model's tokenizer: {err}"
        ) from None


def docs_enabled(settings: ServeSettings) -> bool:
    """Whether ``/docs`` (FastAPI's interactive API page) is served: ``settings.docs``, by default on when the server
    listens on a loopback address only. The page makes the browser load its scripts from a CDN (jsDelivr); the server
    itself sends nothing anywhere."""
    from finesim.serving.settings import is_loopback

    return settings.docs if settings.docs is not None else is_loopback(settings.host)


def _encode_vector(row: np.ndarray, encoding_format: str) -> Any:
    """A vector as a list of floats, or (``base64``) its little-endian float32 bytes in base64, as OpenAI sends."""
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(row, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in row]
