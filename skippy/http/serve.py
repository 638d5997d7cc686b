"""Run the HTTP app under hypercorn (trio worker) next to the engine.

The server binds and answers ``/health`` (503) at once while the model
loads in a worker thread; when the engine is ready ``/health`` turns 200.

Graceful shutdown on SIGINT/SIGTERM: the listening sockets close (new
connections are refused), requests arriving on open connections get 503,
running requests and streams may finish for ``shutdown_grace`` seconds;
then what still runs is cancelled (a final SSE error event for streams),
the engine is closed and :func:`serve` returns 0. A second signal cancels
at once.
"""

from __future__ import annotations

import logging
import signal

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from skippy.actors.engine import open_engine
from skippy.engine.config import EngineConfig
from skippy.http.app import AppState, Lifecycle, create_app
from skippy.http.settings import ServerSettings

log = logging.getLogger("skippy.serve")


def hypercorn_config(host: str, port: int, *, shutdown_grace: float = 30.0) -> HypercornConfig:
    """hypercorn settings: listen backlog 2048, keep-alive on, no access log (we log per request).

    hypercorn's own ``graceful_timeout`` is the last resort after our grace period
    (``shutdown_grace`` plus 5 s for the final SSE events to flush).
    """
    cfg = HypercornConfig()
    cfg.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    cfg.backlog = 2048
    cfg.keep_alive_timeout = 75
    cfg.accesslog = None
    cfg.graceful_timeout = shutdown_grace + 5
    return cfg


async def _watch_signals(stop: trio.Event, lifecycle: Lifecycle, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """First SIGINT/SIGTERM sets ``stop``; a second one cancels running requests at once."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for sig in signals:
            if not stop.is_set():
                log.info("received %s, shutting down (running requests may finish)", signal.Signals(sig).name)
                stop.set()
            else:
                log.info("received %s again, cancelling running requests", signal.Signals(sig).name)
                lifecycle.expire()


async def _shut_down(lifecycle: Lifecycle, sockets: Sockets, grace: float) -> None:
    """Refuse new connections, let running requests finish for ``grace`` seconds, then cancel them."""
    lifecycle.drain()
    # hypercorn stops its accept loops when the shutdown trigger returns; once they are
    # cancelled, closing the listening sockets makes new connections fail fast (refused)
    await trio.sleep(0.05)
    for sock in [*sockets.insecure_sockets, *sockets.secure_sockets]:
        sock.close()
    with trio.move_on_after(grace):
        while lifecycle.running:
            await trio.sleep(0.05)
    if lifecycle.running:
        log.info("shutdown grace of %gs is over: cancelling %d running requests", grace, lifecycle.running)
    lifecycle.expire()


async def serve(config: EngineConfig, *, host: str = "127.0.0.1", port: int = 8080,
                settings: ServerSettings | None = None) -> int:
    """Serve until SIGINT/SIGTERM; returns the process exit code (1 if the model failed to load)."""
    settings = settings or ServerSettings()
    state = AppState()
    app = create_app(state, settings)
    hconfig = hypercorn_config(host, port, shutdown_grace=settings.shutdown_grace)
    sockets = hconfig.create_sockets()
    for sock in sockets.insecure_sockets:
        sock.listen(hconfig.backlog)
    stop = trio.Event()
    exit_code = 0

    async def load_engine(cancel_scope: trio.CancelScope) -> None:
        nonlocal exit_code
        try:
            async with open_engine(config) as engine:
                state.engine = engine
                log.info("model %s loaded: n_ctx=%d per sequence, %d parallel sequences", engine.model_id,
                         engine.meta.n_ctx_seq, engine.meta.n_seq_max)
                await trio.sleep_forever()
        except Exception as exc:
            log.error("could not load the model: %s", exc)
            state.load_error = f"model failed to load: {exc}"
            exit_code = 1
            cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        await nursery.start(_watch_signals, stop, state.lifecycle)

        async def shutdown_trigger() -> None:
            await stop.wait()
            nursery.start_soon(_shut_down, state.lifecycle, sockets, settings.shutdown_grace)

        nursery.start_soon(load_engine, nursery.cancel_scope)
        # hypercorn.trio.serve() without its own sockets: we close ours on shutdown
        await worker_serve(wrap_app(app, hconfig.wsgi_max_body_size, "asgi"), hconfig, sockets=sockets,
                           shutdown_trigger=shutdown_trigger)
        nursery.cancel_scope.cancel()
    return exit_code
