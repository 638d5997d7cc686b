"""Run the HTTP app under hypercorn (trio worker) next to the engine.

The server binds and answers ``/health`` (503) at once while the model
loads in a worker thread; when the engine is ready ``/health`` turns 200.
SIGINT/SIGTERM stop the server; the engine is closed after it.
"""

from __future__ import annotations

import logging
import signal

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from skippy.actors.engine import open_engine
from skippy.engine.config import EngineConfig
from skippy.http.app import AppState, create_app

log = logging.getLogger("skippy.serve")


def hypercorn_config(host: str, port: int) -> HypercornConfig:
    """hypercorn settings: listen backlog 2048, keep-alive on, no access log (we log per request)."""
    cfg = HypercornConfig()
    cfg.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    cfg.backlog = 2048
    cfg.keep_alive_timeout = 75
    cfg.accesslog = None
    cfg.graceful_timeout = 5
    return cfg


async def _wait_for_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for sig in signals:
            log.info("received %s, shutting down", signal.Signals(sig).name)
            return


async def serve(config: EngineConfig, *, host: str = "127.0.0.1", port: int = 8080,
                max_body_bytes: int = 4 * 1024 * 1024) -> int:
    """Serve until SIGINT/SIGTERM; returns the process exit code (1 if the model failed to load)."""
    state = AppState()
    app = create_app(state, max_body_bytes=max_body_bytes)
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
        nursery.start_soon(load_engine, nursery.cancel_scope)
        await hypercorn_serve(app, hypercorn_config(host, port), shutdown_trigger=_wait_for_signal)
        nursery.cancel_scope.cancel()
    return exit_code
