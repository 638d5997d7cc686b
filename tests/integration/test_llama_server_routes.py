"""llama-server's native routes and behaviours on the real server (issue 17): reasoning templates open
thinking by default, /completion, /slots and slot files, /props, /apply-template fields."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import pytest

from tests.paths import CHAT_TEMPLATES
from tests.sse import DONE, iter_sse
from tests.support import Server

LONG = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg in Mainz "
        "combined movable metal type, oil-based ink and a screw press adapted from wine making. "
        "Summarize this in one sentence:")


@pytest.fixture(scope="module")
def qwq(tmp_path_factory: pytest.TempPathFactory):
    """QwQ's template (thinking forced open), slot files in a temporary directory, POST /props on."""
    tmp = tmp_path_factory.mktemp("llama_server")
    with Server(["--parallel", "2", "--n-ctx", "1024", "--chat-template", str(CHAT_TEMPLATES / "Qwen-QwQ-32B.jinja"),
                 "--slot-save-path", str(tmp / "slots"), "--props"], tmp / "server.log") as srv:
        srv.slots_dir = tmp / "slots"  # type: ignore[attr-defined]
        yield srv


def post(srv: Server, path: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(srv.base_url + path, json=body, timeout=120, **kw)


def schema_check(srv: Server, path: str, method: str, instance: object) -> None:
    doc = httpx.get(srv.base_url + "/openapi.json", timeout=10).json()
    schema = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator({**schema, "components": doc["components"]})
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(instance)]
    assert not errors, errors[:5]


# -- bug 2: thinking is open by default -----------------------------------------------------------

def test_reasoning_template_opens_thinking_and_chat_returns_reasoning_content(qwq: Server) -> None:
    import openai

    prompt = post(qwq, "/apply-template", {"messages": [{"role": "user", "content": "What is today?"}]}).json()
    assert prompt["prompt"].endswith("<|im_start|>assistant\n<think>\n")  # llama-server's; was <think>\n</think>
    props = httpx.get(qwq.base_url + "/props", timeout=10).json()
    assert props["chat_template_caps"]["thinking_forced_open"] is True
    client = openai.OpenAI(base_url=qwq.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    reply = client.chat.completions.create(model="SmolLM2-135M-Instruct", max_tokens=8, temperature=0,
                                           messages=[{"role": "user", "content": "What is today?"}])
    assert (reply.choices[0].message.model_extra or {}).get("reasoning_content")
    off = post(qwq, "/apply-template", {"messages": [{"role": "user", "content": "hi"}],
                                        "chat_template_kwargs": {"enable_thinking": False}}).json()
    assert off["prompt"].endswith("<think>\n</think>")


def test_apply_template_takes_the_chat_fields(qwq: Server) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    assert post(qwq, "/apply-template", {"messages": msgs, "add_generation_prompt": False}).json()["prompt"] == \
        "<|im_start|>user\nhi<|im_end|>\n"
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    with_tools = post(qwq, "/apply-template", {"messages": msgs, "tools": tools}).json()["prompt"]
    assert "get_weather" in with_tools and "<tools>" in with_tools


def test_two_assistant_messages_at_the_end_are_400(qwq: Server) -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"},
            {"role": "assistant", "content": "b"}]
    for path, body in (("/v1/chat/completions", {"messages": msgs, "max_tokens": 2}),
                       ("/apply-template", {"messages": msgs})):
        r = post(qwq, path, body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "messages" and "2 or more assistant" in r.json()["error"]["message"]


# -- native /completion ---------------------------------------------------------------------------

def test_native_completion_shape(qwq: Server) -> None:
    r = post(qwq, "/completion", {"prompt": "Hello, my name is", "n_predict": 4, "temperature": 0,
                                  "return_tokens": True, "n_probs": 2})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["stop"] is True and d["stop_type"] == "limit" and d["tokens_predicted"] == 4
    assert d["content"] == " Alex, and I"  # llama-server's answer with the same model and prompt
    assert len(d["tokens"]) == 4 and d["tokens_evaluated"] == 5 and d["id_slot"] in (0, 1)
    assert [p["id"] for p in d["completion_probabilities"]] == d["tokens"]
    assert all(len(p["top_logprobs"]) == 2 for p in d["completion_probabilities"])
    assert d["generation_settings"]["n_predict"] == 4 and d["generation_settings"]["n_probs"] == 2
    assert d["timings"]["predicted_n"] == 4 and d["prompt"] == "Hello, my name is"
    schema_check(qwq, "/completion", "post", d)
    # /completions without /v1 is the native route too, as in llama-server
    assert post(qwq, "/completions", {"prompt": "Hello, my name is", "n_predict": 4, "temperature": 0}).json()[
        "content"] == " Alex, and I"


def test_native_completion_prompts_stops_and_tokens(qwq: Server) -> None:
    ids = post(qwq, "/tokenize", {"content": "Hello, my name is"}).json()["tokens"]
    by_ids = post(qwq, "/completion", {"prompt": ids, "n_predict": 4, "temperature": 0}).json()
    mixed = post(qwq, "/completion", {"prompt": [*ids[:2], " my name is"], "n_predict": 4, "temperature": 0}).json()
    assert by_ids["content"] == mixed["content"] == " Alex, and I"
    several = post(qwq, "/completion", {"prompt": ["Hello, my name is", [*ids]], "n_predict": 2,
                                        "temperature": 0}).json()
    assert isinstance(several, list) and [s["index"] for s in several] == [0, 1]
    assert several[0]["content"] == several[1]["content"] == " Alex,"
    word = post(qwq, "/completion", {"prompt": "Hello, my name is", "n_predict": 8, "temperature": 0,
                                     "stop": [","]}).json()
    assert (word["stop_type"], word["stopping_word"], word["content"]) == ("word", ",", " Alex")
    bad = post(qwq, "/completion", {"prompt": [10 ** 9], "n_predict": 2})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt"


def test_native_completion_stream_progress_and_timings(qwq: Server) -> None:
    body = {"prompt": "Once upon a time there was", "n_predict": 3, "temperature": 0, "stream": True,
            "return_progress": True, "timings_per_token": True, "return_tokens": True}
    with httpx.stream("POST", qwq.base_url + "/completion", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        chunks = list(iter_sse(resp))
    assert DONE not in chunks  # llama-server ends the native stream with the stop chunk
    assert chunks[0]["prompt_progress"]["total"] == chunks[0]["prompt_progress"]["processed"] == 6
    tokens = [c for c in chunks[1:] if not c["stop"]]
    assert [len(c["tokens"]) for c in tokens] == [1, 1, 1] and all("timings" in c for c in tokens)
    assert "".join(c["content"] for c in chunks) == " a small town"
    assert chunks[-1]["stop"] is True and chunks[-1]["stop_type"] == "limit"


def test_chat_stream_timings_per_token_and_progress_as_the_llama_cpp_web_ui_asks(qwq: Server) -> None:
    """llama.cpp's web UI streams chat with ``timings_per_token`` and ``return_progress``: a
    ``prompt_progress`` chunk before the first token, then each token's last chunk with the ``timings``
    so far (they used to come on the finish chunk only); the same prompt again reads its prefix from the cache."""
    body = {"messages": [{"role": "user", "content": "Count from one to ten."}], "max_tokens": 6,
            "temperature": 0, "stream": True, "timings_per_token": True, "return_progress": True,
            "stream_options": {"include_usage": True}}

    def chunks() -> list[dict]:
        with httpx.stream("POST", qwq.base_url + "/v1/chat/completions", json=body, timeout=120) as resp:
            assert resp.status_code == 200
            return [c for c in iter_sse(resp) if c != DONE]

    first = chunks()
    n_prompt = first[-1]["usage"]["prompt_tokens"]
    progress = [c for c in first if "prompt_progress" in c]
    assert len(progress) == 1 and progress[0]["choices"][0]["delta"] == {}
    p = progress[0]["prompt_progress"]
    assert p["total"] == p["processed"] == n_prompt and p["time_ms"] >= 0
    assert first.index(progress[0]) == 1  # after the role chunk, before any text
    texts = [c for c in first if c["choices"] and c["choices"][0]["delta"].get("reasoning_content",
                                                                              c["choices"][0]["delta"].get("content"))]
    assert texts and all("timings" in c for c in texts)
    counts = [c["timings"]["predicted_n"] for c in texts]
    assert counts == sorted(counts) and 1 <= counts[0] and counts[-1] <= 6
    assert all(c["timings"]["prompt_n"] + c["timings"]["cache_n"] == n_prompt for c in texts)
    again = [c for c in chunks() if "prompt_progress" in c][0]["prompt_progress"]
    assert again["total"] == n_prompt and again["cache"] > 0  # the same prompt: its prefix reused
    plain = {k: v for k, v in body.items() if k not in ("timings_per_token", "return_progress")}
    with httpx.stream("POST", qwq.base_url + "/v1/chat/completions", json=plain, timeout=120) as resp:
        rest = [c for c in iter_sse(resp) if c != DONE]
    assert not any("prompt_progress" in c for c in rest)
    assert [bool(c.get("timings")) for c in rest if c["choices"]][-1]  # the finish chunk's alone
    assert not any("timings" in c for c in rest if c["choices"] and c["choices"][0]["finish_reason"] is None)


def test_a_long_prompt_reports_each_prefill_step_before_the_first_token(qwq: Server) -> None:
    """``return_progress`` on a prompt that takes several prefill steps (-b 512): a ``prompt_progress`` per
    step, ``processed`` growing to the whole prompt, as llama-server reports each batch."""
    body = {"messages": [{"role": "user", "content": "alpha beta gamma delta " * 180 + "Which word came first?"}],
            "max_tokens": 2, "temperature": 0, "stream": True, "return_progress": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", qwq.base_url + "/v1/chat/completions", json=body, timeout=120) as resp:
        chunks = [c for c in iter_sse(resp) if c != DONE]
    n_prompt = chunks[-1]["usage"]["prompt_tokens"]
    assert 512 < n_prompt < 1000
    steps = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
    assert len(steps) >= 2 and [s["total"] for s in steps] == [n_prompt] * len(steps)
    processed = [s["processed"] for s in steps]
    assert processed == sorted(set(processed)) and processed[-1] == n_prompt
    assert processed[0] <= steps[0]["cache"] + 512
    first_text = next((i for i, c in enumerate(chunks) if c["choices"] and (
        c["choices"][0]["delta"].get("content") or c["choices"][0]["delta"].get("reasoning_content")
        or c["choices"][0]["finish_reason"])))
    assert all(i < first_text for i, c in enumerate(chunks) if "prompt_progress" in c)


def test_live_timings_and_progress_of_a_held_back_tool_call_follow_the_scheduler(server: Server) -> None:
    """A forced tool call shows nothing until the call parses: the progress still comes before it, and the
    live timings' cached tokens and prompt time are the final ones (they were read from the first visible
    chunk: the generation counted as prompt time, the cache as 0, a million tokens per second)."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": tools,
            "tool_choice": "required", "max_tokens": 60, "temperature": 0, "stream": True,
            "timings_per_token": True, "return_progress": True}
    for _ in range(2):  # the second time with its prefix cached
        with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, timeout=120) as resp:
            chunks = [c for c in iter_sse(resp) if c != DONE]
        final = next(c["timings"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
        call = next(i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["delta"].get("tool_calls"))
        progress = [i for i, c in enumerate(chunks) if "prompt_progress" in c]
        assert progress and max(progress) < call
        assert chunks[progress[-1]]["prompt_progress"]["cache"] == final["cache_n"]
        live = [c["timings"] for c in chunks[:-1] if "timings" in c and c["choices"]
                and c["choices"][0]["finish_reason"] is None]
        assert live and all(t["cache_n"] == final["cache_n"] for t in live)
        assert all(abs(t["prompt_ms"] - final["prompt_ms"]) < 0.1 * final["prompt_ms"] + 5 for t in live), (live, final)
        assert live[-1]["predicted_ms"] <= final["predicted_ms"] + 50 and live[-1]["predicted_per_second"] < 10000


def test_v1_completions_stream_timings_per_token_and_progress(qwq: Server) -> None:
    body = {"prompt": "Once upon a time there was", "max_tokens": 3, "temperature": 0, "stream": True,
            "timings_per_token": True, "return_progress": True}
    with httpx.stream("POST", qwq.base_url + "/v1/completions", json=body, timeout=120) as resp:
        chunks = [c for c in iter_sse(resp) if c != DONE]
    assert chunks[0]["prompt_progress"]["total"] == 6 and chunks[0]["choices"][0]["text"] == ""
    texts = [c for c in chunks if c["choices"] and c["choices"][0]["text"]]
    assert "".join(c["choices"][0]["text"] for c in texts) == " a small town"
    assert [c["timings"]["predicted_n"] for c in texts] == [1, 2, 3]
    finish = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
    assert finish["timings"]["predicted_n"] == 3  # the finish chunk's, as chat's


def test_progress_goes_out_while_an_echo_waits_for_its_prompts_scores(qwq: Server) -> None:
    """``echo`` with ``logprobs`` sends the prompt once it is scored (after the prefill); the prefill steps'
    progress no longer waits behind it (all of it came at once, after the prefill)."""
    prompt = "cat " * 600
    body = {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 2, "temperature": 0, "stream": True,
            "return_progress": True}
    with httpx.stream("POST", qwq.base_url + "/v1/completions", json=body, timeout=120) as resp:
        chunks = [c for c in iter_sse(resp) if c != DONE]
    progress = [i for i, c in enumerate(chunks) if "prompt_progress" in c]
    echo = next(i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["text"] == prompt)
    assert len(progress) >= 2 and max(progress) < echo


def test_native_samplers_json_schema_and_grammar(qwq: Server) -> None:
    base = {"prompt": "Hello, my name is", "n_predict": 4, "temperature": 0}
    ok = post(qwq, "/completion", {**base, "samplers": ["top_k", "dry", "min_p", "temperature"]}).json()
    assert ok["generation_settings"]["top_p"] == 1.0 and ok["generation_settings"]["samplers"] == [
        "top_k", "dry", "min_p", "temperature"]  # as given (llama-server's echo); dry is off at its default
    r = post(qwq, "/completion", {**base, "samplers": ["temperature", "top_k"]})  # an order our chain cannot run
    assert r.status_code == 400 and r.json()["error"]["param"] == "samplers"
    for samplers in (["top_k", "tfs_z"], "kf"):  # an unknown name is left out, as llama.cpp does (tfs: removed)
        r = post(qwq, "/completion", {**base, "samplers": samplers})
        assert r.status_code == 200 and r.json()["generation_settings"]["samplers"] == ["top_k"], samplers
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    out = post(qwq, "/completion", {"prompt": "A JSON object with a name:", "n_predict": 40, "temperature": 0,
                                    "json_schema": schema}).json()
    assert out["stop_type"] == "eos" and isinstance(json.loads(out["content"])["name"], str)
    yes = post(qwq, "/completion", {**base, "grammar": 'root ::= "yes" | "no"'}).json()
    assert yes["content"] in ("yes", "no")
    assert post(qwq, "/completion", {**base, "grammar": "root ::= ("}).status_code == 400


def test_v1_completions_takes_n_predict(client) -> None:
    reply = client.completions.create(model="SmolLM2-135M-Instruct", prompt="Hello, my name is", temperature=0,
                                      extra_body={"n_predict": 4})
    assert reply.usage.completion_tokens == 4 and reply.choices[0].finish_reason == "length"


# -- /slots ---------------------------------------------------------------------------------------

def test_slots_state_and_save_erase_restore_reuse_the_kv(qwq: Server) -> None:
    first = post(qwq, "/completion", {"prompt": LONG, "n_predict": 2, "temperature": 0}).json()
    slot = first["id_slot"]
    slots = httpx.get(qwq.base_url + "/slots", timeout=10).json()
    schema_check(qwq, "/slots", "get", slots)
    assert [s["id"] for s in slots] == [0, 1] and not any(s["is_processing"] for s in slots)
    assert slots[slot]["n_kv"] >= first["tokens_evaluated"] - 2 and slots[slot]["n_ctx"] == 1024
    saved = post(qwq, f"/slots/{slot}?action=save", {"filename": "long.bin"}).json()
    assert saved["n_saved"] == slots[slot]["n_kv"] and saved["n_written"] > 0 and saved["filename"] == "long.bin"
    for other in range(2):  # nothing of LONG stays resident anywhere
        post(qwq, f"/slots/{other}?action=erase", {})
    assert all(s["n_kv"] == 0 for s in httpx.get(qwq.base_url + "/slots", timeout=10).json())
    cold = post(qwq, "/v1/completions", {"prompt": LONG, "max_tokens": 2, "temperature": 0, "cache_prompt": False})
    assert cold.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    post(qwq, f"/slots/{slot}?action=erase", {})
    restored = post(qwq, f"/slots/{slot}?action=restore", {"filename": "long.bin"}).json()
    assert restored["n_restored"] == saved["n_saved"] and restored["n_read"] == saved["n_written"]
    again = post(qwq, "/v1/completions", {"prompt": LONG, "max_tokens": 2, "temperature": 0}).json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= saved["n_saved"] - 2  # the restored KV
    assert again["choices"][0]["text"] == first["content"]


@pytest.mark.parametrize("url,body,status,param", [
    ("/slots/0?action=save", {"filename": "../x.bin"}, 400, "filename"),
    ("/slots/0?action=save", {}, 400, "filename"),
    ("/slots/0?action=restore", {"filename": "missing.bin"}, 400, "filename"),
    ("/slots/0?action=fly", {}, 400, "action"),
    ("/slots/7?action=erase", {}, 400, "id_slot"),
    ("/slots/abc?action=erase", {}, 400, "id_slot"),
])
def test_slot_action_errors(qwq: Server, url: str, body: dict, status: int, param: str) -> None:
    r = post(qwq, url, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_saving_a_slot_onto_a_folder_is_a_400(qwq: Server) -> None:
    """A filename that names a folder of --slot-save-path: the request's fault (it was a 500)."""
    (qwq.slots_dir / "dir.bin").mkdir(parents=True, exist_ok=True)  # type: ignore[attr-defined]
    r = post(qwq, "/slots/0?action=save", {"filename": "dir.bin"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "filename", r.text


def test_slot_actions_need_slot_save_path(server: Server) -> None:
    r = httpx.post(server.base_url + "/slots/0?action=erase", timeout=10)
    assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"
    assert httpx.get(server.base_url + "/slots", timeout=10).status_code == 200  # --slots is the default


def test_no_slots_flag(tmp_path: Path) -> None:
    with Server(["--parallel", "1", "--n-ctx", "256", "--no-slots"], tmp_path / "server.log") as srv:
        r = httpx.get(srv.base_url + "/slots", timeout=10)
        assert r.status_code == 501 and "--slots" in r.json()["error"]["message"]


# -- /props ---------------------------------------------------------------------------------------

def test_props_generation_settings_and_post(qwq: Server, server: Server) -> None:
    params = httpx.get(qwq.base_url + "/props", timeout=10).json()["default_generation_settings"]["params"]
    assert (params["temperature"], params["top_k"], params["top_p"], params["min_p"]) == (0.8, 40, 0.95, 0.05)
    assert params["n_predict"] == -1 and params["samplers"][-1] == "temperature"
    assert post(qwq, "/props", {"n_ctx": 1}).json() == {"success": True}
    r = post(server, "/props", {})
    assert r.status_code == 501 and "--props" in r.json()["error"]["message"]
    props = httpx.get(qwq.base_url + "/props", timeout=10).json()  # llama-server's fields its web UI reads
    assert props["build_info"].startswith("skippy-trio ") and props["is_sleeping"] is False
    assert (props["endpoint_slots"], props["endpoint_props"], props["endpoint_metrics"]) == (True, True, True)
    assert props["modalities"] == {"vision": False, "audio": False, "video": False} and props["model_alias"]


# -- token counting ---------------------------------------------------------------------------------

def test_chat_input_tokens_counts_what_chat_prefills(server: Server) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}}]
    for body in ({"messages": [{"role": "user", "content": "Hello there, how are you?"}]},
                 {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools}):
        for path in ("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"):
            counted = post(server, path, body)
            assert counted.status_code == 200, counted.text
            assert counted.json()["object"] == "response.input_tokens"
            schema_check(server, "/v1/chat/completions/input_tokens", "post", counted.json())
        reply = post(server, "/v1/chat/completions", {**body, "max_tokens": 1, "temperature": 0}).json()
        assert counted.json()["input_tokens"] == reply["usage"]["prompt_tokens"]
    bad = post(server, "/v1/chat/completions/input_tokens", {"messages": []})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"


# -- the reasoning budget (llama-server's --reasoning-budget / thinking_budget_tokens) -------------

COUNT = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]


def test_thinking_budget_tokens_forces_the_close_after_that_many_reasoning_tokens(qwq: Server) -> None:
    """QwQ's prompt opens <think>; SmolLM2 never closes it, so without a budget all 30 tokens are reasoning.
    With a budget of 5 the close is forced after 5 tokens (the unlimited run's first 5, then the tag's
    tokens with logprob 0), and the rest is content, streamed and not."""
    body = {"model": "m", "max_tokens": 30, "temperature": 0, "logprobs": True, "messages": COUNT}
    free = post(qwq, "/v1/chat/completions", body).json()["choices"][0]
    assert free["message"]["reasoning_content"] and not free["message"].get("content")
    capped = post(qwq, "/v1/chat/completions", {**body, "thinking_budget_tokens": 5}).json()["choices"][0]
    message = capped["message"]
    assert message["content"] and message["reasoning_content"]
    assert free["message"]["reasoning_content"].startswith(message["reasoning_content"])
    free_tokens = [t["token"] for t in free["logprobs"]["content"]]
    tokens = [(t["token"], t["logprob"]) for t in capped["logprobs"]["content"]]
    assert [t for t, _ in tokens[:5]] == free_tokens[:5]
    assert "".join(t for t, _ in tokens[5:8]) == "</think>" and {lp for _, lp in tokens[5:8]} == {0.0}
    with httpx.stream("POST", qwq.base_url + "/v1/chat/completions", timeout=120,
                      json={**body, "thinking_budget_tokens": 5, "stream": True}) as resp:
        deltas = [event["choices"][0]["delta"] for event in iter_sse(resp) if event != DONE]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == message["reasoning_content"]
    assert "".join(d.get("content") or "" for d in deltas) == message["content"]


def test_a_zero_thinking_budget_closes_at_once_and_a_bad_one_is_400(qwq: Server) -> None:
    body = {"model": "m", "max_tokens": 12, "temperature": 0, "messages": COUNT}
    message = post(qwq, "/v1/chat/completions", {**body, "thinking_budget_tokens": 0}).json()["choices"][0]["message"]
    assert not message.get("reasoning_content") and message["content"]
    bad = post(qwq, "/v1/chat/completions", {**body, "thinking_budget_tokens": -2})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "thinking_budget_tokens"
