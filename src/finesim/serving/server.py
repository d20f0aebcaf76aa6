"""Run the application under uvicorn: the socket, graceful SIGTERM, and a failed model load as an error.

SIGTERM (and Ctrl-C) use uvicorn's graceful shutdown: the listening socket is closed at once (no new
connections), requests in flight are answered, then the application's shutdown stops the batching worker. After
a graceful stop uvicorn re-raises the signal it caught; :func:`serve` installs a SIGTERM handler that ignores it,
so a server stopped by SIGTERM exits with status 0 (Ctrl-C still ends as an interrupt, exit code 130).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from finesim.serving.settings import ServeSettings, is_loopback

logger = logging.getLogger("finesim.serving")

# Seconds uvicorn waits for requests in flight after SIGTERM before it cancels them.
GRACEFUL_SHUTDOWN_S = 60


def serve(
    settings: ServeSettings,
    *,
    say: Callable[[str], None] = print,
    log_level: int = logging.WARNING,
    loader: Callable[[], Any] | None = None,
) -> int:
    """Serve ``settings.model`` until SIGTERM or Ctrl-C; returns 0 after a graceful stop.

    Args:
        settings: what to serve and how.
        say: a printer of progress lines (the address, once the model is ready).
        log_level: uvicorn's log level (its access log is at INFO).
        loader: loads the scorer (default: by name, :func:`finesim.serving.app.default_loader`).

    Raises:
        RuntimeError: the model could not be loaded, or ``settings.index`` not opened with it (the server stops at
            once).
    """
    import uvicorn

    from finesim.serving.app import create_app

    if not is_loopback(settings.host) and settings.api_key is None:
        logger.warning(
            "listening on %s without an API key: anyone who can reach this port can use the model (set --api-key-env)",
            settings.host,
        )
    if settings.workers > 1:
        return _serve_workers(settings, say=say, log_level=log_level)
    from finesim.serving.app import set_threads

    set_threads(settings)
    holder: dict[str, Any] = {}

    def stop_on_failure(err: BaseException) -> None:
        server = holder.get("server")
        if server is not None:
            server.should_exit = True

    app = create_app(settings, loader=loader, on_ready=lambda: say("model ready"), on_load_error=stop_on_failure)
    config, sock, url = _listen(app, settings, log_level)
    server = uvicorn.Server(config)
    holder["server"] = server
    what = "the model" if settings.index is None else f"the model and the index {settings.index}"
    say(f"serving {settings.model} on {url} (loading {what}; GET /health answers 200 once ready)")
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _ignore_signal)
    try:
        server.run(sockets=[sock])
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        sock.close()
    state = app.state.model
    if state.status == "failed" and state.failed_stage == "index":
        raise RuntimeError(f"could not serve {settings.model} with its index: {state.error}")
    if state.status == "failed":
        raise RuntimeError(f"could not load the model {settings.model}: {state.error}")
    return 0


def _listen(app: Any, settings: ServeSettings, log_level: int, **options: Any) -> tuple[Any, Any, str]:
    """uvicorn's config for ``app`` (with ``options``), its listening socket, and the address as a URL."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,  # finesim's logging set-up (-v / -q) applies to uvicorn's loggers too
        log_level=log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        server_header=False,
        **options,
    )
    reasons = _Captured()
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addFilter(reasons)  # uvicorn logs why it cannot bind, then exits: the reason goes in finesim's error
    try:
        sock = config.bind_socket()
    except SystemExit:
        why = "; ".join(reasons.messages) or "in use, or not an address here"
        raise OSError(f"cannot listen on {settings.host}:{settings.port}: {why}") from None
    finally:
        uvicorn_log.removeFilter(reasons)
    host, port = sock.getsockname()[:2]
    return config, sock, f"http://{f'[{host}]' if ':' in host else host}:{port}"


class _Captured(logging.Filter):
    """A filter that keeps the messages of the ERROR records it sees and stops them (they are reported otherwise)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            self.messages.append(record.getMessage())
            return False
        return True


def _ignore_signal(signum: int, frame: Any) -> None:
    """The SIGTERM handler in place after uvicorn's graceful shutdown: the stop has been done already."""


def _serve_workers(settings: ServeSettings, *, say: Callable[[str], None], log_level: int) -> int:
    """``settings.workers`` server processes behind one listening socket, under uvicorn's multi-process supervisor:
    the kernel hands each new connection to one of them; each loads the model (with
    :meth:`ServeSettings.worker_threads` torch threads) and micro-batches the requests of its own connections.
    SIGTERM stops every worker gracefully. A worker that dies is restarted by the supervisor."""
    import os

    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    from finesim.serving.app import SETTINGS_ENV
    from finesim.serving.supervision import SUPERVISOR_ENV

    os.environ[SETTINGS_ENV] = settings.to_environment()  # the spawned workers read it
    os.environ[SUPERVISOR_ENV] = str(os.getpid())  # they stop when this process dies (serving/supervision.py)
    app = "finesim.serving.app:app_from_environment"
    config, sock, url = _listen(app, settings, log_level, factory=True, workers=settings.workers)
    threads = settings.worker_threads()
    say(
        f"serving {settings.model} on {url} with {settings.workers} worker processes"
        + (f" ({threads} torch thread(s) each)" if threads else "")
        + "; each loads the model, GET /health answers 200 from a worker once its model is ready"
    )
    supervisor = Multiprocess(config, sockets=[sock])
    try:
        supervisor.run()
    finally:
        sock.close()
        os.environ.pop(SETTINGS_ENV, None)
        os.environ.pop(SUPERVISOR_ENV, None)
    if any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes):
        raise RuntimeError(f"could not serve {settings.model}: a worker failed to start (its error is above)")
    return 0
