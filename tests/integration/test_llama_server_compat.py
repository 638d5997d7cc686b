"""skippy serve as a drop-in for llama-server (issue 17): its command line, auth and CORS habits,
its /metrics names, several listen addresses, TLS, JSON logs and request ids.

Each server here is started with a llama-server command line (``-c``, ``-np``, ``-t``, ``-fa``,
``--jinja``...) and checked with real clients (httpx, openai) over loopback.
"""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.sse import DONE, sse_events
from tests.support import SYSTEM, Server, assert_envelope, free_port

KEY = "sk-compat-" + "c" * 20
HI = [SYSTEM, {"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def llama_cli(tmp_path_factory: pytest.TempPathFactory):
    """A llama-server command line: -c 1024 over -np 2 (512 per sequence), two addresses, an API key,
    CORS for localhost origins, JSON logs also written to a file."""
    tmp = tmp_path_factory.mktemp("llama_cli")
    args = ["-c", "1024", "-np", "2", "-t", "1", "-fa", "auto", "--jinja", "--no-webui", "-ngl", "0", "--metrics",
            "--slots", "--host", "::1", "--api-key", KEY, "--cors-origins", "localhost", "--log-format", "json",
            "--log-file", str(tmp / "file.log")]
    with Server(args, tmp / "server.log") as srv:
        srv.file_log = tmp / "file.log"  # type: ignore[attr-defined]
        yield srv


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def request_lines(srv: Server, request_id: str, timeout: float = 30) -> list[dict]:
    """The JSON request log lines of ``request_id`` (waits for the first: a stream logs at its end)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [r for r in json_lines(srv.log()) if r.get("request_id") == request_id]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    full = f"{name}{{{want}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(full + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no sample {full}")


# -- the command line ------------------------------------------------------------------------------

def test_a_llama_server_command_line_serves_with_its_meaning(llama_cli: Server) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    props = httpx.get(llama_cli.base_url + "/props", headers=auth, timeout=30).json()
    assert (props["total_slots"], props["n_ctx"]) == (2, 512)  # -c is the total over the slots, as llama-server
    page = httpx.get(llama_cli.base_url + "/", headers={**auth, "Accept": "text/html"}, timeout=30)
    assert page.status_code == 200 and page.text == "Ollama is running"  # --no-webui: no playground, to a browser too
    # both addresses answer (--host 127.0.0.1 from the fixture, --host ::1 here)
    for url in (llama_cli.base_url, f"http://[::1]:{llama_cli.port}"):
        assert httpx.get(url + "/health", timeout=10).status_code == 200
    log = llama_cli.log()
    running = [r["message"] for r in json_lines(log) if r["message"].startswith("Running on")]
    assert running == [f"Running on http://127.0.0.1:{llama_cli.port} (CTRL + C to quit)",
                       f"Running on http://[::1]:{llama_cli.port} (CTRL + C to quit)"]  # once each
    messages = [r["message"] for r in json_lines(log)]
    loaded = next(i for i, m in enumerate(messages) if m.startswith("model SmolLM2-135M-Instruct loaded"))
    assert messages.index(running[0]) > loaded  # after the model has loaded, not when the socket opens
    assert "chat template: the GGUF's tokenizer.chat_template (368 chars)" in messages
    # llama.cpp's compute buffer line, as llama-server prints it; llama.cpp's chatter stays out when not verbose
    assert any(re.fullmatch(r"llama\.cpp: sched_reserve: +CPU compute buffer size = +[0-9.]+ MiB", m) for m in messages)
    assert not any("print_info:" in m or "llama_model_loader:" in m for m in messages)


def test_an_unknown_llama_server_flag_is_refused_by_name() -> None:
    proc = subprocess.run([sys.executable, "-m", "skippy", "serve", "-m", "SmolLM2-135M-Instruct", "-ngld", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "No such option '-ngld'" in proc.stderr, proc.stderr


# -- auth and CORS -------------------------------------------------------------------------------

def test_x_api_key_is_accepted_like_a_bearer_key(llama_cli: Server) -> None:
    url = llama_cli.base_url + "/v1/models"
    assert httpx.get(url, headers={"X-Api-Key": KEY}, timeout=10).status_code == 200
    assert_envelope(httpx.get(url, headers={"X-Api-Key": KEY + "x"}, timeout=10), 401, "invalid_api_key")
    assert_envelope(httpx.get(url, timeout=10), 401, "invalid_api_key")
    # Anthropic-style clients send only X-Api-Key: the openai client can be told to do the same
    client = openai.OpenAI(base_url=llama_cli.base_url + "/v1", api_key="unused", max_retries=0,
                           default_headers={"Authorization": "", "X-Api-Key": KEY})
    assert client.models.list().data[0].id == "SmolLM2-135M-Instruct"


@pytest.mark.parametrize("origin", ["http://localhost:5173", "http://127.0.0.1:3000", "http://[::1]:8081",
                                    "https://localhost"])
def test_cors_localhost_keyword_allows_loopback_origins(llama_cli: Server, origin: str) -> None:
    url = llama_cli.base_url + "/v1/chat/completions"
    preflight = {"Origin": origin, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "x-api-key, content-type"}
    resp = httpx.options(url, headers=preflight, timeout=10)  # no key: browsers send none on preflight
    assert resp.status_code == 200, resp.text  # llama-server answers 200
    assert resp.headers["Access-Control-Allow-Origin"] == origin
    assert resp.headers["Access-Control-Allow-Credentials"] == "true"
    assert "POST" in resp.headers["Access-Control-Allow-Methods"]
    assert resp.headers["Access-Control-Allow-Headers"] == "x-api-key, content-type"
    ok = httpx.post(url, json={"messages": HI, "max_tokens": 1}, headers={"Origin": origin, "X-Api-Key": KEY},
                    timeout=60)
    assert ok.status_code == 200 and ok.headers["Access-Control-Allow-Origin"] == origin


def test_cors_localhost_keyword_refuses_other_origins(llama_cli: Server) -> None:
    url = llama_cli.base_url + "/v1/chat/completions"
    for origin in ("https://evil.example", "http://localhost.evil.example", "http://127.0.0.2:80"):
        resp = httpx.options(url, headers={"Origin": origin, "Access-Control-Request-Method": "POST"}, timeout=10)
        assert_envelope(resp, 403, "cors_origin_not_allowed")  # on purpose: llama-server answers 200 bare
        assert "Access-Control-Allow-Origin" not in resp.headers


# -- request ids and the log line ----------------------------------------------------------------

def test_request_id_is_echoed_and_names_the_reply(llama_cli: Server) -> None:
    client = openai.OpenAI(base_url=llama_cli.base_url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    raw = client.chat.completions.with_raw_response.create(
        model="SmolLM2-135M-Instruct", messages=HI, max_tokens=3, temperature=0,
        extra_headers={"X-Request-Id": "req-chat-1"})
    assert raw.headers["X-Request-Id"] == "req-chat-1" and raw.parse().id == "chatcmpl-req-chat-1"
    stream = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=HI, max_tokens=3, stream=True,
                                            extra_headers={"X-Request-Id": "req-chat-2"})
    assert {chunk.id for chunk in stream} == {"chatcmpl-req-chat-2"}
    text = client.completions.create(model="SmolLM2-135M-Instruct", prompt="Hi", max_tokens=2,
                                     extra_headers={"X-Request-Id": "req-text-1"})
    assert text.id == "cmpl-req-text-1"
    made = httpx.get(llama_cli.base_url + "/health", timeout=10).headers["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{24}", made)  # generated when the client sends none


def test_json_request_log_line_has_the_request_fields(llama_cli: Server) -> None:
    auth = {"X-Api-Key": KEY}
    body = {"messages": HI, "max_tokens": 4, "temperature": 0}
    resp = httpx.post(llama_cli.base_url + "/v1/chat/completions", json=body,
                      headers={**auth, "X-Request-Id": "log-ok-1"}, timeout=60)
    usage = resp.json()["usage"]
    [line] = request_lines(llama_cli, "log-ok-1")
    assert line["level"] == "INFO" and line["logger"] == "skippy.http"
    assert line["route"] == "POST /v1/chat/completions" and line["status"] == 200
    assert re.fullmatch(r"127\.0\.0\.1:\d+", line["client"])
    assert (line["prompt_tokens"], line["cached_tokens"], line["completion_tokens"]) == (
        usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], usage["completion_tokens"])
    assert 0 < line["ttft_ms"] <= line["duration_ms"]
    assert line["finish_reason"] in ("stop", "length") and "code" not in line

    too_long = [{"role": "user", "content": "word " * 600}]  # a prompt over the 512 tokens of a slot (-c 1024 -np 2)
    bad = httpx.post(llama_cli.base_url + "/v1/chat/completions", json={**body, "messages": too_long},
                     headers={**auth, "X-Request-Id": "log-bad-1"}, timeout=60)
    assert bad.status_code == 400
    [line] = request_lines(llama_cli, "log-bad-1")
    assert line["status"] == 400 and line["code"] == "context_length_exceeded"
    assert line["reason"] == bad.json()["error"]["message"]
    # the --log-file copy holds the same lines
    assert any(r.get("request_id") == "log-bad-1" for r in json_lines(llama_cli.file_log.read_text()))


def test_a_client_disconnect_is_logged_as_such(llama_cli: Server) -> None:
    body = {"messages": HI, "max_tokens": 400, "stream": True, "logit_bias": {"2": -100}}
    with httpx.stream("POST", llama_cli.base_url + "/v1/chat/completions", json=body,
                      headers={"X-Api-Key": KEY, "X-Request-Id": "log-gone-1"}, timeout=60) as resp:
        for _ in zip(range(3), resp.iter_lines(), strict=False):  # a few events, then the client goes away
            pass
    [line] = request_lines(llama_cli, "log-gone-1")
    assert line["disconnected"] is True and line["status"] is None and "code" not in line
    assert "client disconnected" in line["message"] and " 499 " not in line["message"]
    assert line["finish_reason"] == "cancelled"


# -- /metrics --------------------------------------------------------------------------------------

LLAMACPP = ["prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total", "tokens_predicted_total",
            "tokens_predicted_seconds_total", "n_decode_total", "n_tokens_max", "prompt_tokens_seconds",
            "predicted_tokens_seconds", "requests_processing", "requests_deferred", "n_busy_slots_per_decode",
            "kv_cache_tokens", "kv_cache_usage_ratio"]


def test_metrics_have_llama_servers_names_and_skippys_counters(llama_cli: Server) -> None:
    url, auth = llama_cli.base_url, {"X-Api-Key": KEY}
    httpx.get(url + "/metrics", headers=auth, timeout=10)  # the throughput gauges cover the time since the last scrape
    body = {"messages": [SYSTEM, {"role": "user", "content": "Name a colour. " * 8}], "max_tokens": 4,
            "temperature": 0}
    for _ in range(2):  # the second reuses the first's prompt prefix
        assert httpx.post(url + "/v1/chat/completions", json=body, headers=auth, timeout=60).status_code == 200
    httpx.post(url + "/v1/chat/completions", json={"messages": "nope"}, headers=auth, timeout=10)  # 400
    for junk in ("JUNK1", "JUNK2"):  # a method a client makes up counts as "other": no series per name
        httpx.request(junk, url + "/v1/models", timeout=10)
    t_scrape = time.time()
    resp = httpx.get(url + "/metrics", headers=auth, timeout=10)
    assert resp.status_code == 200
    text = resp.text
    for name in LLAMACPP:
        metric(text, "llamacpp:" + name)
    assert metric(text, "llamacpp:prompt_tokens_cached_total") > 0
    assert metric(text, "llamacpp:prompt_seconds_total") > 0
    assert metric(text, "llamacpp:tokens_predicted_seconds_total") > 0
    assert metric(text, "llamacpp:n_decode_total") >= 8
    assert metric(text, "llamacpp:n_tokens_max") >= 40
    assert 1.0 <= metric(text, "llamacpp:n_busy_slots_per_decode") <= 2.0
    assert metric(text, "llamacpp:prompt_tokens_seconds") > 0 and metric(text, "llamacpp:predicted_tokens_seconds") > 0
    assert 0 < metric(text, "llamacpp:kv_cache_usage_ratio") <= 1
    assert metric(text, "skippy:http_route_responses_total", method="POST", route="/v1/chat/completions",
                  status="200") >= 2
    assert metric(text, "skippy:http_route_responses_total", method="POST", route="/v1/chat/completions",
                  status="400") >= 1
    assert metric(text, "skippy:errors_total", code="invalid_request_error") >= 1
    assert "JUNK" not in text and metric(text, "skippy:http_route_responses_total", method="other",
                                         route="unmatched", status="401") >= 2
    assert metric(text, "skippy:finishes_total", finish_reason="length") >= 2
    assert metric(text, "skippy:queue_wait_seconds_count") >= 2 and metric(text, "skippy:prefill_seconds_count") >= 2
    assert metric(text, "process_resident_memory_bytes") > 10 * 2**20 and metric(text, "process_open_fds") > 0
    started = int(resp.headers["Process-Start-Time-Unix"])
    assert t_scrape - 3600 < started <= t_scrape  # Unix seconds of the process start
    assert abs(started - metric(text, "process_start_time_seconds")) < 1


# -- --no-metrics, TLS ---------------------------------------------------------------------------

def test_tls_on_every_address_and_no_metrics(tmp_path: Path) -> None:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "::1", "localhost")
    key_file, cert_file = tmp_path / "key.pem", tmp_path / "cert.pem"
    cert.private_key_pem.write_to_path(str(key_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    port = free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "skippy", "serve", "--host", "127.0.0.1,::1", "--port", str(port), "-np", "1",
             "-c", "512", "-t", "1", "--no-metrics", "--ssl-key-file", str(key_file), "--ssl-cert-file",
             str(cert_file)], stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        urls = [f"https://127.0.0.1:{port}", f"https://[::1]:{port}"]
        with httpx.Client(verify=trust, timeout=30) as https:
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, log_path.read_text()
                try:
                    if https.get(urls[0] + "/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.2)
            for url in urls:
                assert https.get(url + "/health").json()["status"] == "ok"
            client = openai.OpenAI(base_url=urls[1] + "/v1", api_key="x", max_retries=0,
                                   http_client=httpx.Client(verify=trust, timeout=120))
            reply = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=HI, max_tokens=2)
            assert reply.choices[0].finish_reason in ("stop", "length")
            off = https.get(urls[0] + "/metrics")  # llama-server without --metrics
            assert_envelope(off, 501, "not_supported")
            assert off.json()["error"]["type"] == "not_supported_error"
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not served on a TLS address
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        text = log_path.read_text()
        assert f"Running on https://127.0.0.1:{port}" in text and f"Running on https://[::1]:{port}" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_bad_tls_certificate_is_one_error_line_and_exit_code_1(tmp_path: Path) -> None:
    (tmp_path / "key.pem").write_text("not a key\n")
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    proc = subprocess.run([sys.executable, "-m", "skippy", "serve", "--port", str(free_port()),
                           "--ssl-key-file", str(tmp_path / "key.pem"), "--ssl-cert-file", str(tmp_path / "cert.pem")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "cannot use the TLS key" in proc.stderr and "Traceback" not in proc.stderr, \
        proc.stderr


def test_sse_stream_of_the_compat_server_ends_with_done(llama_cli: Server) -> None:
    resp = httpx.post(llama_cli.base_url + "/v1/chat/completions", headers={"X-Api-Key": KEY}, timeout=60,
                      json={"messages": HI, "max_tokens": 2, "stream": True})
    events = sse_events(resp)
    assert events[-1] == DONE and resp.headers["X-Request-Id"]
    finish = events[-2]  # the finish chunk carries its timings, as llama-server's (the llama.cpp web UI reads them)
    assert finish["choices"][0]["finish_reason"] and finish["timings"]["predicted_n"] >= 1, finish
    assert all("timings" not in e for e in events[:-2])
