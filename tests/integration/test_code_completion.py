"""What code-completion clients of llama-server (llama.vim, llama.vscode) send to ``/completion`` and
``/infill``, on the real server and model: ``n_predict`` 0 (a cache warm-up: the prompt goes into the KV
cache, nothing is generated), ``n_indent`` and ``t_max_predict_ms`` (a completion ends at a line),
``response_fields`` (only the fields asked for) and the ``infill`` sampler."""

from __future__ import annotations

import httpx

from tests.sse import iter_sse
from tests.support import Server

#: a prompt long enough for its prefix to be reused (MIN_REUSE)
PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number, computed iteratively.\"\"\"\n" * 3
#: llama.vim's response_fields for a completion (its autoload/llama.vim)
VIM_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
              "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
              "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated", "tokens_cached"]


def complete(srv: Server, **body) -> dict:
    r = httpx.post(srv.base_url + "/completion", json={"prompt": PROMPT, "temperature": 0, **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_n_predict_0_puts_the_prompt_in_the_cache_and_generates_nothing(server: Server) -> None:
    warm = complete(server, n_predict=0, cache_prompt=True)
    assert warm["content"] == "" and warm["tokens_predicted"] == 0 and warm["stop_type"] == "limit"
    n = warm["tokens_evaluated"]
    assert n > 32 and warm["timings"]["predicted_n"] == 0
    # the next request with that prompt reuses it: all but its last tokens come from the cache
    after = complete(server, n_predict=2, cache_prompt=True)
    assert after["tokens_predicted"] == 2 and after["timings"]["cache_n"] >= n - 2
    # max_tokens 0 (llama-server reads it as n_predict) and a stream: one final chunk
    assert complete(server, max_tokens=0)["tokens_predicted"] == 0
    with httpx.stream("POST", server.base_url + "/completion", json={"prompt": PROMPT, "n_predict": 0, "stream": True},
                      timeout=120) as r:
        assert r.status_code == 200
        [only] = list(iter_sse(r))
    assert only["stop"] is True and only["content"] == "" and only["tokens_predicted"] == 0
    # the OpenAI routes keep OpenAI's rule
    r = httpx.post(server.base_url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 0}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


def test_n_indent_ends_the_completion_at_a_line_indented_less(server: Server) -> None:
    grammar = 'root ::= "if x:\\n    y = 1\\n    z = 2\\nprint(y)\\nprint(z)\\n"'
    whole = complete(server, grammar=grammar, n_predict=60)
    assert whole["content"] == "if x:\n    y = 1\n    z = 2\nprint(y)\nprint(z)\n"
    cut = complete(server, grammar=grammar, n_predict=60, n_indent=4)
    assert cut["content"] == "if x:\n    y = 1\n    z = 2\n"
    assert cut["stop_type"] == "limit" and cut["tokens_predicted"] < whole["tokens_predicted"]
    r = httpx.post(server.base_url + "/completion", json={"prompt": PROMPT, "n_indent": -1}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "n_indent"


def test_t_max_predict_ms_ends_the_completion_at_a_newline_past_the_budget(server: Server) -> None:
    grammar = 'root ::= ("x = 1\\n")+'
    whole = complete(server, grammar=grammar, n_predict=40)
    assert whole["tokens_predicted"] == 40 and whole["stop_type"] == "limit"
    timed = complete(server, grammar=grammar, n_predict=40, t_max_predict_ms=1)
    # a decode step takes longer than 1 ms: the first newline after the first piece ends it
    assert timed["content"] in ("x = 1\n", "x = 1\nx = 1\n") and timed["stop_type"] == "limit"


def test_response_fields_keep_only_the_fields_asked_for(server: Server) -> None:
    got = complete(server, n_predict=3, response_fields=VIM_FIELDS)
    assert set(got) == set(VIM_FIELDS) and got["timings/predicted_n"] == 3
    assert complete(server, n_predict=0, response_fields=[""]) == {}
    with httpx.stream("POST", server.base_url + "/completion", timeout=120, json={
            "prompt": PROMPT, "n_predict": 2, "stream": True, "response_fields": ["content", "stop"]}) as r:
        *chunks, last = list(iter_sse(r))
    assert last == {"content": "", "stop": True} and all("tokens_predicted" in c for c in chunks)


def test_the_infill_sampler_is_taken(server: Server) -> None:
    got = complete(server, n_predict=4, top_k=40, top_p=0.9, seed=1, samplers=["top_k", "top_p", "infill"])
    assert got["generation_settings"]["samplers"] == ["top_k", "top_p", "infill"]
    assert got["tokens_predicted"] >= 1


def test_n_cmpl_gives_several_completions_of_each_prompt_in_llama_servers_order(server: Server) -> None:
    """llama-server's ``n_cmpl`` (alias ``n``): a prompt's completions together, the prompts in order, the
    ``j``-th seeded with ``seed`` + ``j``; one completion in all stays one object."""
    body = {"prompt": ["Once upon a time", "The capital of France is"], "n_predict": 3, "temperature": 1.0, "seed": 5}
    r = httpx.post(server.base_url + "/completion", json={**body, "n_cmpl": 2}, timeout=120)
    assert r.status_code == 200, r.text
    answers = r.json()
    assert [a["index"] for a in answers] == [0, 1, 2, 3]
    assert [a["prompt"] for a in answers] == ["Once upon a time"] * 2 + ["The capital of France is"] * 2
    assert [a["generation_settings"]["seed"] for a in answers] == [5, 6, 5, 6]
    assert all(a["tokens_predicted"] == 3 for a in answers)
    two = httpx.post(server.base_url + "/completion", json={**body, "prompt": "Once upon a time", "n": 2},
                     timeout=120).json()
    assert isinstance(two, list) and len(two) == 2  # "n" is its alias
    r = httpx.post(server.base_url + "/completion", json={**body, "n_cmpl": 64}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "n_cmpl"


def test_llama_vims_instruction_mode_on_the_chat_route(server: Server) -> None:
    """llama.vim's instruction mode warms the cache with a chat body of ``n_predict`` 0 (llama-server's name wins
    over ``max_tokens`` on every route), then streams the answer with ``samplers`` ["min_p", "temperature"]."""
    system = {"role": "system", "content": "You are a text-editing assistant. Respond only with the result.\n"
              "--- SELECTION ---\n" + PROMPT}
    warm = httpx.post(server.base_url + "/v1/chat/completions", timeout=120, json={
        "id_slot": 0, "messages": [system, {"role": "user", "content": ""}], "samplers": [], "n_predict": 0,
        "stream": False, "cache_prompt": True, "response_fields": [""]})
    assert warm.status_code == 200, warm.text
    body = warm.json()
    assert body["choices"][0]["message"]["content"] == "" and body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 0
    msgs = [system, {"role": "user", "content": "INSTRUCTION: add a docstring"}]
    answer = httpx.post(server.base_url + "/v1/chat/completions", timeout=120, json={
        "id_slot": 1, "messages": msgs, "min_p": 0.1, "temperature": 0.1, "samplers": ["min_p", "temperature"],
        "cache_prompt": True, "n_predict": 8, "max_tokens": 100})
    assert answer.status_code == 200, answer.text
    usage = answer.json()["usage"]
    assert usage["completion_tokens"] <= 8  # n_predict wins over max_tokens
    assert usage["prompt_tokens_details"]["cached_tokens"] > 32  # the warm-up's system prompt
    bad = httpx.post(server.base_url + "/v1/chat/completions", timeout=60,
                     json={"messages": msgs, "samplers": ["temperature", "top_k"]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "samplers"


def llama_vim_fim(lines: list[str], y: int, extra: list[dict]) -> dict:
    """llama.vim's completion request with the cursor at the start of line ``y`` (its autoload/llama.vim)."""
    indent = len(lines[y]) - len(lines[y].lstrip())
    return {"id_slot": 0, "input_prefix": "\n".join(lines[max(0, y - 64):y]) + "\n",
            "input_suffix": "\n" + "\n".join(lines[y + 1:y + 17]) + "\n", "input_extra": extra,
            "prompt": lines[y][:indent], "n_predict": 16, "stop": [], "n_indent": indent, "top_k": 40, "top_p": 0.90,
            "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True, "t_max_prompt_ms": 500,
            "t_max_predict_ms": 1000, "response_fields": VIM_FIELDS}


def test_infill_as_llama_vim_sends_it(fim_server: str) -> None:
    """llama.vim's two /infill bodies, replayed: the ring-buffer warm-up answers ``{}`` and puts the extra
    context in the cache; a completion answers the fields it asks for; the next one, a line further down (the
    prefix window slid by one line), prefills only a little of its prompt (the shared start, and with
    --cache-reuse the prefix lines that moved up)."""
    lines = [f"def step_{i}(values):\n    return [v * {i} for v in values if v > {i}]\n" for i in range(60)]
    lines = "".join(lines).split("\n")
    extra = [{"filename": "util.py", "text": "".join(f"CONST_{i} = {i * i}\n" for i in range(40))}]
    warm = httpx.post(fim_server + "/infill", timeout=120, json={
        "id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "", "n_predict": 0,
        "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True, "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1, "response_fields": [""]})
    assert warm.status_code == 200 and warm.json() == {}
    first = httpx.post(fim_server + "/infill", json=llama_vim_fim(lines, 80, extra), timeout=120).json()
    assert set(first) == set(VIM_FIELDS) and first["timings/predicted_n"] >= 1
    assert first["timings/prompt_n"] < first["tokens_cached"] - 300  # the extra context came from the warm-up
    second = httpx.post(fim_server + "/infill", json=llama_vim_fim(lines, 81, extra), timeout=120).json()
    # the prefix's 63 kept lines moved up a line: reused; prefilled are the line the cursor left, the suffix
    # (one line further down, so not a continuation of the cached prompt) and the middle
    assert second["timings/prompt_n"] < first["timings/prompt_n"] / 3, (first, second)


def test_a_ring_whose_oldest_chunk_was_dropped_is_reused(fim_server: str) -> None:
    """llama.vim's ring buffer, full, drops its oldest chunk for a new one: the prompt then shares only the
    repository header with the cached one (fewer tokens than the prefix cache's minimum), but with
    --cache-reuse the chunks that stayed are moved up and reused, not prefilled again."""
    chunks = [{"filename": f"f{i}.py", "text": "".join(f"VALUE_{i}_{j} = {i * j + 7}\n" for j in range(40))}
              for i in range(4)]

    def warm(extra: list[dict]) -> dict:
        r = httpx.post(fim_server + "/infill", timeout=120, json={
            "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "", "n_predict": 0,
            "samplers": [], "cache_prompt": True})
        assert r.status_code == 200, r.text
        return r.json()

    first = warm(chunks[:3])
    second = warm(chunks[1:])
    assert second["timings"]["prompt_n"] < first["timings"]["prompt_n"] / 2, (first["timings"], second["timings"])
    assert second["timings"]["cache_n"] > first["timings"]["prompt_n"] / 2


def test_an_empty_prompt_object_is_a_400_not_a_wait(server: Server) -> None:
    """A prompt object whose prompt_string is empty tokenizes to nothing (SmolLM2 adds no BOS): a 400, where
    the request used to wait forever in the queue (found by the schema fuzzer)."""
    r = httpx.post(server.base_url + "/completion", json={"prompt": {"prompt_string": ""}}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"


def _saved(base: str) -> float:
    """The server's ``skippy:ctx_checkpoints_saved_total`` (prompt-cache saves included)."""
    text = httpx.get(base + "/metrics", timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("skippy:ctx_checkpoints_saved_total"))


def test_a_completion_does_not_save_the_prompt_it_replaces_where_completion_does(fim_server: str) -> None:
    """llama-server saves a slot's prompt to its prompt cache for completion tasks only: an /infill prompt is
    rebuilt around the cursor at each request, and saving the one it replaces (~45 MB for 2000 tokens) cost each
    completion ~25 ms. Two completions in different files that share the ring's extra chunk: /infill takes the
    first one's slot without a save; /completion, with prompts of the same shape as text, saves it first. (Each second
    request follows its first at once: well within the idle scheduler's save delay.)"""
    extra = [{"filename": "ring.py", "text": "".join(f"RING_{i} = {i * 7}\n" for i in range(60))}]

    def file(name: str) -> str:
        return "\n".join([f"def {name}_{i}(x):" for i in range(40)] + [f"    return x * {i}" for i in range(40)]) + "\n"

    for route in ("/infill", "/completion"):
        names = (f"alpha{route[1]}", f"beta{route[1]}")
        if route == "/infill":
            bodies = [{"input_extra": extra, "input_prefix": file(n), "input_suffix": "\n", "prompt": ""}
                      for n in names]
        else:  # the same shape as text: the ring's chunk, then the file
            bodies = [{"prompt": extra[0]["text"] + file(n)} for n in names]
        for body in bodies:
            body.update(n_predict=1, temperature=0, cache_prompt=True)
        assert httpx.post(fim_server + route, json=bodies[0], timeout=120).status_code == 200
        before = _saved(fim_server)
        assert httpx.post(fim_server + route, json=bodies[1], timeout=120).status_code == 200
        assert (_saved(fim_server) - before) == (0 if route == "/infill" else 1), route
