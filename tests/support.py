"""Shared test helpers: the one place test modules (and the benchmarks) take a helper from another file.

Test modules import helpers from here, never from each other; ``conftest.py`` files hold the fixtures
(which build on these helpers). The real chat templates are in :mod:`tests.paths`, the SSE readers in
:mod:`tests.sse`, the tiny random-weight models in :mod:`tests.tiny_models`.

Imports at the top are the standard library and httpx only, so the benchmarks (``bench/``, which import
:func:`free_port`) load nothing else; each helper imports what else it needs (llama_cpp, numpy, jsonschema,
openai) when called.

- servers: :func:`free_port`, :class:`Server` (a real ``skippy serve`` subprocess), :data:`SYSTEM`, the
  second real model (:data:`GEMMA`, :func:`gemma_path`), :func:`openai_client`
- replies: :func:`ask` (a greedy chat completion), :func:`read_metrics` (``/metrics`` parsed),
  :func:`assert_envelope` (an error reply's shape), :data:`SYSTEM_LONG`, :data:`BATCH_PROMPTS`
- the served OpenAPI document: :func:`json_schema`, :func:`sse_schema`, :func:`validator`, :func:`check`
- tool calls: :data:`WEATHER`, :data:`ASK`, :data:`NAMED`, :func:`check_call`
- llama.cpp as the reference: :class:`Raw` (llama-cpp-python's low-level API with the server's context
  shape), :data:`STEP_TOKENS`
- grammars and chat-format parsers (unit tests): :func:`gbnf_matches`, :func:`compiles_in_llama_cpp`,
  :func:`check_invariant`
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    import jsonschema
    import numpy as np
    import openai

    from skippy.engine.chat.formats.base import Delta, ParsedMessage


# -- servers ----------------------------------------------------------------------------------------

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS picks it; another process may take it before it is used)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Server:
    """A running ``skippy serve`` subprocess; ``with Server(...) as srv`` waits until it is ready and stops it."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "skippy", "serve", "--host", "127.0.0.1", "--port", str(self.port), *args],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def __enter__(self) -> Server:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

#: The second real model (issue 18): Gemma 3 270M, sliding-window attention, no chat template.
GEMMA = "gemma-3-270m"


def gemma_path() -> Path | None:
    """The pulled Gemma 3 GGUF (``make test`` pulls it), or ``None`` when it is not in the cache."""
    from skippy.models import resolve_model

    try:
        path = resolve_model(GEMMA)
    except (LookupError, ValueError, OSError):
        return None
    return path if path.is_file() else None


def openai_client(base_url: str) -> openai.OpenAI:
    """openai-python's client on a server's ``/v1`` (no retries, 120 s timeout)."""
    import openai

    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


# -- replies ----------------------------------------------------------------------------------------

SYSTEM_LONG = ("You are a meticulous travel assistant for the Northwind travel agency. " * 30).strip()

#: Prompts whose greedy 16-token answers were measured to hold whether they run alone or batched together.
BATCH_PROMPTS = [
    "What is the capital of France?",
    "Name three colors.",
    "Write a haiku about the sea.",
    "Give me a word that rhymes with cat.",
    "Describe a dog in one sentence.",
    "What is the opposite of hot?",
    "List two fruits.",
]


def ask(base_url: str, messages: list[dict], max_tokens: int = 24, **extra) -> dict:
    """A greedy (temperature 0) chat completion that must succeed; the reply's JSON."""
    r = httpx.post(base_url + "/v1/chat/completions", timeout=120,
                   json={"messages": messages, "temperature": 0, "max_tokens": max_tokens, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def read_metrics(base_url: str) -> dict[str, float]:
    """Every sample of ``/metrics`` (parsed by prometheus_client), keyed ``name{label=value,...}``."""
    from prometheus_client.parser import text_string_to_metric_families

    resp = httpx.get(base_url + "/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            key = sample.name + "".join(f"{{{k}={v}}}" for k, v in sorted(sample.labels.items()))
            out[key] = sample.value
    return out


def assert_envelope(resp: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> None:
    """``resp`` is an OpenAI error envelope with this status (and code and param, when given)."""
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    if code is not None:
        assert err["code"] == code
    if param is not None:
        assert err["param"] == param


# -- the served OpenAPI document (/openapi.json) ----------------------------------------------------

def validator(doc: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    import jsonschema

    # the operation's schema, with the document's components in reach of its "#/components/..." refs
    return jsonschema.Draft202012Validator({**schema, "components": doc["components"]})


def json_schema(doc: dict[str, Any], path: str, method: str, status: str = "200") -> dict[str, Any]:
    return doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]


def sse_schema(doc: dict[str, Any], path: str) -> dict[str, Any]:
    return doc["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"]["x-sse-data"]


def check(doc: dict[str, Any], schema: dict[str, Any], instance: Any) -> None:
    errors = sorted(validator(doc, schema).iter_errors(instance), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])


# -- tool calls -------------------------------------------------------------------------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def check_call(name: str, arguments: str) -> None:
    """A call of :data:`WEATHER` whose arguments validate against its parameters."""
    import jsonschema

    assert name == "get_weather"
    jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])


# -- llama.cpp as the reference ---------------------------------------------------------------------

STEP_TOKENS = 256  # the server's default prefill chunk (--step-tokens)


class Raw:
    """One model on llama-cpp-python's low-level API with the server's context shape (4 streams of
    2048 cells, n_batch 512, no full-size SWA cache), decoding sequence 0 greedily."""

    def __init__(self, path: str) -> None:
        import llama_cpp

        from skippy.engine.runtime.llama import _init_backend

        _init_backend(False)  # llama.cpp's log into logging (warnings only), as the server does
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), llama_cpp.llama_model_default_params())
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 2048 * 4, 512, 512, 4
        cp.kv_unified, cp.swa_full, cp.flash_attn_type = False, False, -1
        cp.n_threads = cp.n_threads_batch = os.cpu_count() or 1
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.batch = llama_cpp.llama_batch_init(512, 0, 1)
        self.n_past = 0

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)

    def tokenize(self, text: str, bos: bool = False) -> list[int]:
        import llama_cpp

        data = text.encode()
        arr = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), arr, len(data) + 8, bos, False)
        return list(arr[:n])

    def piece(self, token: int) -> bytes:
        import llama_cpp

        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
        return buf.raw[:n]

    def trim(self, n: int) -> None:
        import llama_cpp

        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self.ctx), 0, n, -1)
        self.n_past = n

    def decode(self, tokens: list[int]) -> np.ndarray:
        """Decode ``tokens`` after the KV in one batch; the last one's logprobs (float64)."""
        import llama_cpp
        import numpy as np

        b = self.batch
        for i, t in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, self.n_past + i, 1, i == len(tokens) - 1
            b.seq_id[i][0] = 0
        b.n_tokens = len(tokens)
        assert llama_cpp.llama_decode(self.ctx, b) == 0
        self.n_past += len(tokens)
        x = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, len(tokens) - 1),
                                  shape=(self.n_vocab,)).astype(np.float64)
        return x - (x.max() + np.log(np.exp(x - x.max()).sum()))

    def prefill(self, tokens: list[int]) -> np.ndarray:
        """Prefill in the server's chunks of ``STEP_TOKENS``."""
        for i in range(0, len(tokens), STEP_TOKENS):
            lp = self.decode(tokens[i:i + STEP_TOKENS])
        return lp

    def greedy(self, lp: np.ndarray, n: int) -> tuple[str, list[float]]:
        """``n`` greedy tokens from the logprobs ``lp`` on (fewer at end of generation): text and logprobs."""
        import llama_cpp
        import numpy as np

        out, lps = b"", []
        for _ in range(n):
            t = int(np.argmax(lp))
            if llama_cpp.llama_vocab_is_eog(self.vocab, t):
                break
            out += self.piece(t)
            lps.append(float(lp[t]))
            lp = self.decode([t])
        return out.decode("utf-8", "replace"), lps


# -- grammars and chat-format parsers ---------------------------------------------------------------

def _gbnf_rules(text):
    """Parse a GBNF grammar (the subset the converter emits) into a small AST."""
    esc = {"n": "\n", "r": "\r", "t": "\t"}

    def char(s, i):
        if s[i] != "\\":
            return s[i], i + 1
        c = s[i + 1]
        width = {"x": 2, "u": 4, "U": 8}.get(c)
        if width:
            return chr(int(s[i + 2:i + 2 + width], 16)), i + 2 + width
        return esc.get(c, c), i + 2

    def alt(s, i):
        seqs = []
        while True:
            items = []
            while i < len(s) and s[i] not in "|)":
                if s[i] == " ":
                    i += 1
                    continue
                if s[i] == '"':
                    lit, i = "", i + 1
                    while s[i] != '"':
                        c, i = char(s, i)
                        lit += c
                    node, i = ("lit", lit), i + 1
                elif s[i] == "[":
                    neg, i, ranges = s[i + 1] == "^", i + 1 + (s[i + 1] == "^"), []
                    while s[i] != "]":
                        lo, i = char(s, i)
                        hi = lo
                        if s[i] == "-" and s[i + 1] != "]":
                            hi, i = char(s, i + 1)
                        ranges.append((lo, hi))
                    node, i = ("cls", neg, ranges), i + 1
                elif s[i] == "(":
                    node, i = alt(s, i + 1)
                    i += 1
                else:
                    m = re.match(r"[A-Za-z0-9-]+", s[i:])
                    node, i = ("ref", m.group()), i + m.end()
                while i < len(s) and s[i] in "?*+":
                    node, i = (s[i], node), i + 1
                items.append(node)
            seqs.append(("seq", items))
            if i < len(s) and s[i] == "|":
                i += 1
                continue
            return ("alt", seqs), i

    return {name: alt(body, 0)[0] for name, body in (line.split(" ::= ", 1) for line in text.splitlines())}


def gbnf_matches(gbnf, s, rule="root"):
    """Whether the GBNF grammar ``gbnf`` (the subset our converters emit) matches all of ``s`` from ``rule``."""
    rules = _gbnf_rules(gbnf)

    def m(node, i):
        kind = node[0]
        if kind == "lit":
            if s.startswith(node[1], i):
                yield i + len(node[1])
        elif kind == "cls":
            if i < len(s) and (any(lo <= s[i] <= hi for lo, hi in node[2]) != node[1]):
                yield i + 1
        elif kind == "ref":
            yield from m(rules[node[1]], i)
        elif kind == "alt":
            for seq in node[1]:
                yield from m(seq, i)
        elif kind == "seq":
            def seq(k, j):
                if k == len(node[1]):
                    yield j
                else:
                    for j2 in m(node[1][k], j):
                        yield from seq(k + 1, j2)
            yield from seq(0, i)
        elif kind == "?":
            yield from m(node[1], i)
            yield i
        elif kind in "*+":
            def star(j):
                for j2 in m(node[1], j):
                    if j2 > j:
                        yield from star(j2)
                yield j
            if kind == "*":
                yield from star(i)
            else:
                for j in m(node[1], i):
                    yield from star(j)

    return any(j == len(s) for j in m(("ref", rule), 0))


def compiles_in_llama_cpp(gbnf, patterns=()):
    """Parse with llama.cpp itself (no vocab needed to parse a grammar)."""
    import llama_cpp

    if patterns:
        arr = (ctypes.c_char_p * len(patterns))(*(p.encode() for p in patterns))
        sampler = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
            None, gbnf.encode(), b"root", arr, len(patterns), None, 0)
    else:
        sampler = llama_cpp.llama_sampler_init_grammar(None, gbnf.encode(), b"root")
    ok = bool(sampler)
    if ok:
        llama_cpp.llama_sampler_free(sampler)
    return ok


def check_invariant(deltas: list[Delta], msg: ParsedMessage) -> None:
    """A chat-format parser's streamed deltas add up to its final message: content, reasoning and tool
    calls (the first delta of a call carries its id and name, indexes count up from 0)."""
    from skippy.engine.chat.formats.base import ToolCall

    assert "".join(d.content for d in deltas) == msg.content
    assert "".join(d.reasoning_content for d in deltas) == msg.reasoning_content
    calls: dict[int, list] = {}
    for d in deltas:
        for tc in d.tool_calls:
            if tc.index not in calls:
                assert tc.id is not None and tc.name, "first delta of a call carries id and name"
                assert tc.index == len(calls), "indexes count up from 0"
                calls[tc.index] = [tc.id, tc.name, tc.arguments]
            else:
                assert tc.id is None and tc.name is None, "later deltas carry only arguments"
                calls[tc.index][2] += tc.arguments
    assert tuple(ToolCall(*c) for c in calls.values()) == msg.tool_calls
