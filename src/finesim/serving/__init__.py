"""``finesim serve``: an HTTP server (FastAPI + uvicorn) for any finesim scorer.

- :mod:`~finesim.serving.settings`: :class:`ServeSettings`, the model, limits, batching and cache.
- :mod:`~finesim.serving.app`: :func:`create_app`, the routes and the model loaded in the background.
- :mod:`~finesim.serving.schemas`: request bodies and their checks.
- :mod:`~finesim.serving.engine`: what a micro-batch computes, through ``ConditionalScorer``'s own functions.
- :mod:`~finesim.serving.search`: the index ``POST /search`` searches (``--index``), opened with the served model.
- :mod:`~finesim.serving.batching`: the worker thread that owns the model and gathers micro-batches.
- :mod:`~finesim.serving.cache`: the LRU cache of embeddings (of pair scores for cross-encoders).
- :mod:`~finesim.serving.limits`: ASGI middleware for metrics, auth, concurrency and body size.
- :mod:`~finesim.serving.metrics`: Prometheus metrics; :mod:`~finesim.serving.errors`: the error shape.
- :mod:`~finesim.serving.server`: :func:`serve`, uvicorn with graceful SIGTERM.

Needs the ``serve`` extra (``pip install 'finesim[serve]'``). See docs/serving.md.
"""

from __future__ import annotations

from finesim.serving.settings import ServeSettings

__all__ = ["ServeSettings", "create_app", "serve"]


def __getattr__(name: str):
    """Import the FastAPI parts on first use, so the settings import without the ``serve`` extra."""
    if name == "create_app":
        from finesim.serving.app import create_app

        return create_app
    if name == "serve":
        from finesim.serving.server import serve

        return serve
    raise AttributeError(f"module 'finesim.serving' has no attribute {name!r}")
