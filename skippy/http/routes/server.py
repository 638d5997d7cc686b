"""The server's own routes, whatever API a client speaks: ``/health``, ``/openapi.json``, ``/metrics``."""

from __future__ import annotations

from typing import Any

from quart import Response

from skippy.engine.errors import DeviceLost
from skippy.engine.protocols.llama_server import wire
from skippy.http.context import ShuttingDown, shared
from skippy.http.replies import (
    engine_error_response,
    error_response,
    json_response,
)


async def health() -> Response:
    """llama-server ``GET /health``: 503 ``Loading model`` while the (default) model loads, and while a lone model
    loads again (``--keep-alive`` unloaded it), as llama-server answers while its one model loads; else 200 with
    slot counts. With several models served, 200 while any model is loaded or can load (llama-server's router
    mode: a model loading does not fail the server's health), the counts summed over the loaded models and
    ``models_loading`` naming those loading now."""
    app = shared()
    pool = app.state.pool
    if (app.state.engine is None) if pool is None else not pool.ready.is_set():
        return error_response(503, app.state.load_error or "Loading model", "unavailable_error", code="model_loading")
    if app.lifecycle.draining:
        return engine_error_response(ShuttingDown("the server is shutting down"))
    if pool is not None:
        if not pool.healthy():
            return error_response(503, "no model could be loaded: " + "; ".join(
                f"{i}: {pool.error(i)}" for i in pool.ids()), "unavailable_error", code="model_load_failed")
        if pool.single and pool.state(pool.default) == "loading":
            return error_response(503, "Loading model", "unavailable_error", code="model_loading")
        totals = {"slots_idle": 0, "slots_processing": 0, "requests_waiting": 0}
        for _, eng in pool.loaded_engines():
            if problem := eng.device_problem():  # an RPC worker is gone: a supervisor must restart the set
                return engine_error_response(DeviceLost(problem))
            for key, value in eng.stats().items():
                totals[key] += value
        return _health(totals, None if pool.single else [i for i in pool.ids() if pool.state(i) == "loading"])
    engine = app.state.engine
    if engine is not None and (problem := engine.device_problem()):  # an RPC worker is gone: restart the set
        return engine_error_response(DeviceLost(problem))
    return _health(app.engine().stats())


def _health(counts: dict[str, int], loading: list[str] | None = None) -> Response:
    """``/health``'s answer for these counts (:meth:`~skippy.actors.engine.Engine.stats`' keys) and, with several
    models served, the ids of those ``loading``."""
    return json_response(wire.Health(slots_idle=counts["slots_idle"], slots_processing=counts["slots_processing"],
                                     requests_waiting=counts["requests_waiting"],
                                     models_loading=wire.UNSET if loading is None else loading))


async def openapi_json() -> Response:
    return Response(shared().openapi, mimetype="application/json")


async def metrics() -> Response:
    """``GET /metrics``: the Prometheus text of the server's metrics (501 with ``--no-metrics``, as llama-server
    without ``--metrics``). It reads what is there: a lone model that ``--keep-alive`` unloaded is not loaded
    again by a scrape (the playground polls every 3 s), whose answer then holds the process series and
    ``skippy:model_loaded`` 0."""
    from prometheus_client import CONTENT_TYPE_LATEST

    app = shared()
    if not app.settings.metrics:  # llama-server without --metrics
        return error_response(501, "the metrics endpoint is off on this server (started with --no-metrics)",
                              "not_supported_error", code="not_supported")
    pool = app.state.pool
    if pool is not None and not pool.single:
        engine_metrics: Any = pool.metrics
    else:  # a scrape never loads the model (nor counts as its use): unloaded by --keep-alive, the pool's series
        # (process_*, skippy:model_loaded 0) until a request loads it again
        engine = app.loaded_engine(None)
        engine_metrics = engine.metrics if engine is not None else pool.metrics  # type: ignore[union-attr]
    started = engine_metrics.registry.get_sample_value("process_start_time_seconds") or app.state.started
    return Response(engine_metrics.render(), mimetype=CONTENT_TYPE_LATEST.split(";")[0],
                    headers={"Content-Type": CONTENT_TYPE_LATEST, "Process-Start-Time-Unix": str(int(started))})
