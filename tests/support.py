"""Shared test helpers: the one place test modules (and the benchmarks) take a helper from another file.

Test modules import helpers from here, never from each other; ``conftest.py`` files hold the fixtures
(which build on these helpers). The real chat templates are in :mod:`tests.paths`, the SSE readers in
:mod:`tests.sse`, the tiny random-weight models in :mod:`tests.tiny_models`.

Imports at the top are the standard library and httpx only, so the benchmarks (``bench/``, which import
:func:`free_port`) load nothing else; each helper imports what else it needs (llama_cpp, numpy, jsonschema,
openai) when called.

- servers: :func:`free_port`, :class:`Server` (a real ``skippy serve`` subprocess), :class:`RedisServer` (a
  real ``redis-server`` on loopback), :data:`SYSTEM`, the
  second real model (:data:`GEMMA`, :func:`gemma_path`), :func:`openai_client`
- replies: :func:`ask` (a greedy chat completion), :func:`first_top` (the first token's top logprobs),
  :func:`read_metrics` (``/metrics`` parsed),
  :func:`assert_envelope` (an error reply's shape), :data:`SYSTEM_LONG`, :data:`BATCH_PROMPTS`
- the served OpenAPI document: :func:`json_schema`, :func:`sse_schema`, :func:`validator`, :func:`check`
- tool calls: :data:`WEATHER`, :data:`ASK`, :data:`NAMED`, :func:`check_call`
- llama.cpp as the reference: :class:`Raw` (llama-cpp-python's low-level API with the server's context
  shape), :data:`STEP_TOKENS`, :class:`VocabOnly` (a GGUF's vocabulary without its weights),
  :class:`LlamaGrammarOracle` (llama.cpp's grammar sampler judging whether a GBNF grammar takes a text)
- grammars and chat-format parsers (unit tests): :func:`gbnf_matches`, :func:`compiles_in_llama_cpp`,
  :func:`check_invariant`
- the scheduling core over a fake runtime (unit tests; never imported by product code): :class:`FakeRuntime`
  (checks every batch the way llama.cpp would), :class:`Clock`, :func:`make` (a fake runtime and a
  ``SchedulerCore`` over it), :func:`req`, :func:`step`, :func:`run`, :func:`tokens_of`,
  :func:`finish_of`, :data:`EOG`, :data:`FILLER`, :data:`PROMPT`
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    import jsonschema
    import numpy as np
    import openai

    from skippy.engine.chat.formats.base import Delta, ParsedMessage
    from skippy.engine.scheduling.events import FinishEvent


# -- servers ----------------------------------------------------------------------------------------

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS picks it; another process may take it before it is used)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Server:
    """A running ``skippy serve`` subprocess; ``with Server(...) as srv`` waits until it is ready and stops it."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None,
                 port: int | None = None) -> None:
        self.port = port or free_port()  # a port chosen first: servers that must know each other's URL
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

    def kill(self) -> None:
        """``kill -9``: the server gets no chance to clean up (a crash)."""
        self.proc.kill()
        self.proc.wait()
        self._log.close()


def redis_server_binary() -> str:
    """Debian's ``redis-server`` (``.ci/run`` installs it); missing, the test fails under CI, else skips."""
    import shutil

    import pytest
    path = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server")
                                            else None)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (.ci/run apt-installs it): the Redis store tests cannot run")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    return path


class RedisServer:
    """A real ``redis-server`` on a loopback port, in ``workdir`` (append-only file, fsync always: what
    deploy/redis.conf sets); ``url`` is its ``redis://`` URL. :meth:`stop` ends it, :meth:`start` again on
    the same port and data."""

    def __init__(self, workdir: Path) -> None:
        self.binary = redis_server_binary()
        self.workdir, self.port = workdir, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        log = open(self.workdir / "redis.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             "--save", "", "--appendonly", "yes", "--appendfsync", "always"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.workdir / 'redis.log').read_text()}")
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING in 20 s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
            self.proc = None


SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

#: The second real model (issue 18): Gemma 3 270M, sliding-window attention, no chat template.
GEMMA = "gemma-3-270m"

#: ``--override-kv`` values that declare three control tokens of the default model (SmolLM2-135M: <filename>,
#: <gh_stars>, <issue_start>) its FIM prefix, suffix and middle tokens; its GGUF has none (``/infill`` answers 400
#: without them). The model is no infiller, but every fill-in-the-middle path runs for real.
FIM_KV = ("tokenizer.ggml.fim_pre_token_id=int:6", "tokenizer.ggml.fim_suf_token_id=int:7",
          "tokenizer.ggml.fim_mid_token_id=int:8")


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


def first_top(base_url: str, messages: list[dict], **extra) -> tuple[list[tuple[str, float]], dict]:
    """A greedy one-token chat completion that must succeed: its token's top 5 ``(token, logprob)`` and the
    reply's ``usage``."""
    r = httpx.post(base_url + "/v1/chat/completions", timeout=60, json={
        "messages": messages, "temperature": 0, "max_tokens": 1, "logprobs": True, "top_logprobs": 5, **extra})
    assert r.status_code == 200, r.text
    body = r.json()
    top = body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    return [(t["token"], t["logprob"]) for t in top], body["usage"]


#: Two greedy runs of one model on different kernels (a GPU and the CPU, another batch shape) may part where the
#: reference's two best tokens are this close (nats): llama.cpp's kernels round differently, and a near-tie tips.
NEAR_TIE = 0.5


def greedy_steps(base_url: str, messages: list[dict], max_tokens: int = 16, **extra) -> list[tuple[str, float, float]]:
    """A greedy chat completion's tokens with logprobs: per token ``(token, its logprob, the runner-up's)``."""
    body = ask(base_url, messages, max_tokens, logprobs=True, top_logprobs=2, **extra)
    steps = []
    for c in body["choices"][0]["logprobs"]["content"]:
        top = sorted((t["logprob"] for t in c["top_logprobs"]), reverse=True) + [float("-inf")] * 2
        steps.append((c["token"], c["logprob"], top[1]))
    return steps


def parting_beyond_near_tie(ref: list[tuple[str, float, float]], got: list[tuple[str, float, float]],
                            tol: float = NEAR_TIE) -> str | None:
    """``None`` when ``got``'s tokens equal ``ref``'s, or part from them only at a near-tie: at the first token
    where they differ, ``ref``'s best two were within ``tol`` of each other (what follows is not compared).
    Otherwise a description of where and how they part."""
    for i, ((a, lp, runner_up), (b, _, _)) in enumerate(zip(ref, got, strict=False)):
        if a != b:
            if lp - runner_up < tol:
                return None
            return (f"token {i}: {b!r} instead of {a!r}, whose lead over the runner-up was {lp - runner_up:.3f} "
                    f"(near-tie below {tol}); before it: {[t for t, _, _ in ref[:i]]}")
    if len(ref) != len(got):
        return f"{len(got)} tokens instead of {len(ref)}"
    return None


def read_metrics(base_url: str, headers: dict[str, str] | None = None) -> dict[str, float]:
    """Every sample of ``/metrics`` (parsed by prometheus_client), keyed ``name{label=value,...}``; ``headers``: the
    API key of a server that needs one."""
    from prometheus_client.parser import text_string_to_metric_families

    resp = httpx.get(base_url + "/metrics", headers=headers)
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
    assert {"message", "type", "param", "code"} <= set(err) <= {"message", "type", "param", "code",
                                                                "n_prompt_tokens", "n_ctx"}  # llama-server's
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


class VocabOnly:
    """llama.cpp's vocabulary of a GGUF loaded without its weights (``vocab_only``), as the server's
    :class:`~skippy.engine.runtime.vocab.LlamaVocab` (``.vocab``); a context manager that frees the model."""

    def __init__(self, path: str) -> None:
        import llama_cpp

        from skippy.engine.runtime.load import _init_backend
        from skippy.engine.runtime.vocab import LlamaVocab

        _init_backend(verbose=False)  # llama.cpp's log through logging, as the server's (quiet)
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), params)
        assert self.model, f"llama.cpp could not read the vocabulary of {path}"
        vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.vocab = LlamaVocab(vocab, llama_cpp.llama_vocab_n_tokens(vocab))
        self.bos_id = llama_cpp.llama_vocab_bos(vocab)
        self.eog_id = llama_cpp.llama_vocab_eos(vocab)
        self.adds_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))

    def prompt_tokens(self, text: str) -> list[int]:
        """``text`` as the server tokenizes a rendered prompt: BOS added where the model wants one, special
        tokens parsed, one BOS where the template wrote one too."""
        ids = self.vocab.tokenize(text, add_special=True, parse_special=True)
        return ids[1:] if self.adds_bos and len(ids) >= 2 and ids[0] == ids[1] == self.bos_id else ids

    def __enter__(self) -> VocabOnly:
        return self

    def __exit__(self, *exc: object) -> None:
        import llama_cpp

        llama_cpp.llama_model_free(self.model)


class LlamaGrammarOracle:
    """llama.cpp's grammar sampler as the judge of whether a GBNF grammar takes a text: the text is fed one
    character at a time as the vocabulary's one-character tokens (each offered alone to the sampler, as the
    server's sampler offers its pick, then accepted), and the end as an end-of-generation token. Over a
    :class:`VocabOnly`; only texts of characters the vocabulary has single tokens for."""

    def __init__(self, vocab: VocabOnly) -> None:
        v = vocab.vocab
        self.vocab = v
        self.char_token: dict[str, int] = {}
        for t in range(v.n_vocab):
            piece = v.piece(t)
            if len(piece) == 1 and piece.decode("latin-1") not in self.char_token:
                self.char_token[piece.decode("latin-1")] = t
        self.eog = vocab.eog_id

    def _allows(self, sampler: object, token: int) -> bool:
        import llama_cpp

        one = llama_cpp.llama_token_data(id=token, logit=1.0, p=0.0)
        single = llama_cpp.llama_token_data_array(data=ctypes.pointer(one), size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(single))
        return bool(single.data[0].logit != float("-inf"))

    def accepts(self, gbnf: str, text: str) -> bool:
        """True when llama.cpp's grammar sampler for ``gbnf`` (root rule ``root``) takes all of ``text`` and
        then allows the end of generation. Raises ``ValueError`` when llama.cpp does not parse ``gbnf``."""
        import llama_cpp

        sampler = self.vocab.grammar_sampler(gbnf)
        if not sampler:
            raise ValueError("llama.cpp did not parse the grammar")
        try:
            for c in text:
                token = self.char_token[c]
                if not self._allows(sampler, token):
                    return False
                llama_cpp.llama_sampler_accept(sampler, token)  # never a refused token: llama.cpp would abort
            return self._allows(sampler, self.eog)
        finally:
            llama_cpp.llama_sampler_free(sampler)


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
                while i < len(s) and s[i] in "?*+{":
                    if s[i] == "{":  # {m}, {m,} or {m,n}
                        r = re.match(r"\{(\d+)(,(\d*))?\}", s[i:])
                        lo, hi = int(r.group(1)), r.group(3)
                        node, i = ("rep", node, lo, lo if r.group(2) is None else int(hi) if hi else None), i + r.end()
                    else:
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
        elif kind == "rep":
            def rep(j, n):
                if n >= node[2]:
                    yield j
                if node[3] is None or n < node[3]:
                    for j2 in m(node[1], j):
                        if j2 > j:
                            yield from rep(j2, n + 1)
            yield from rep(i, 0)
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


def text_splits(text: str, tries: int = 5, most: int = 12) -> Iterator[list[str]]:
    """``text`` whole, one character at a time, and ``tries`` random splits into at most ``most`` + 1 pieces
    (seeded by its length): the pieces an output parser is fed, streamed and not."""
    yield [text]
    yield list(text)
    rng = random.Random(len(text))
    for _ in range(tries):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, most))))
        yield [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def parse_plan(plan: Any, pieces: list[str], **finish: Any) -> tuple[list[Delta], ParsedMessage]:
    """Feed ``pieces`` to the output parser ``plan`` calls for (``make_output_parser``), its call ids made
    deterministic (``call_0``, ``call_1``...); its deltas and final message (``finish`` goes to its ``finish``)."""
    import itertools

    from skippy.engine.chat.prepare import make_output_parser

    counter = itertools.count()
    parser = make_output_parser(plan)
    if hasattr(parser, "_top"):
        parser._top.inner.id_factory = lambda: f"call_{next(counter)}"
    deltas: list[Delta] = []
    for piece in pieces:
        deltas += parser.feed(piece)
    tail, msg = parser.finish(**finish)
    return deltas + tail, msg


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


# -- the scheduling core over a fake runtime (unit tests) -------------------------------------------

EOG = 0  # the fake model's one end-of-generation token
FILLER = 5  # what a sampler without a script produces
N_VOCAB = 256  # above every token id the tests use (the spec tests use ids up to ~240)


class FakeVocab:
    def tokenize(self, text, *, add_special, parse_special):
        return [10 + (ord(c) % 20) for c in text]

    def piece(self, token):
        """``<id>``: every token's text names it (a lazy grammar's trigger can name a token)."""
        return f"<{token}>".encode()

    def special_tokens(self):
        return None


class FakeSampler:
    def __init__(self, script):
        self.script = list(script)
        self.freed = False
        self.forced: list[int] = []  # tokens accepted without sampling (Runtime.accept)


class FakeRuntime:
    """A model runtime for the scheduling core's unit tests: KV slots as token lists, checked the way
    llama.cpp would take each decode batch (positions follow the sequence's KV, sequence ids in range,
    at most ``n_batch`` tokens, the cells of a unified or per-sequence cache, a sliding window's
    cells); samplers play a script chosen by ``SamplingParams.seed`` (``scripts``), else
    :data:`FILLER`."""

    def __init__(self, n_seq_max=2, n_batch=64, n_ctx_seq=256, recurrent=False, unified=False, embeddings=None,
                 n_swa=0, swa_full=False, lora=()):
        from skippy.engine.runtime.base import ModelMeta

        self.meta = ModelMeta(name="fake", path="fake.gguf", chat_template=None, bos_id=1, eos_id=EOG,
                              eog_ids=frozenset({EOG}), bos_token="<s>", eos_token="</s>",
                              n_vocab=N_VOCAB, n_ctx_train=n_ctx_seq, n_ctx_seq=n_ctx_seq, n_seq_max=n_seq_max,
                              n_batch=n_batch, is_recurrent=recurrent, kv_unified=unified, n_embd=3,
                              embeddings=embeddings, n_swa=n_swa, swa_full=swa_full, lora=tuple(lora),
                              can_shift=not recurrent)
        self.vocab = FakeVocab()
        # LoRA: the set applied to the context (set_lora), and per slot the set each KV position was
        # computed under; a decode asserts that a sequence's KV was all computed under the applied set
        self.lora = ()
        self.lora_sets: list[tuple] = []  # the set of each decode, in order
        self.kv_lora: dict[int, list[tuple]] = {s: [] for s in range(n_seq_max)}
        self.kv = {s: [] for s in range(n_seq_max)}
        # each cell's KV position, and the position the next token takes after it (pos + 1; an M-RoPE
        # image's cells all hold its first position, and the next token comes n_pos positions later)
        self.pos: dict[int, list[int]] = {s: [] for s in range(n_seq_max)}
        self.ends: dict[int, list[int]] = {s: [] for s in range(n_seq_max)}
        # a sliding-window cache (n_swa, not swa_full), as llama.cpp's iSWA one: the SWA layers hold
        # positions swa_lo[s]..end only (None: none, after a trim below the window); a decode at
        # position p needs them from max(0, p - n_swa), else llama.cpp would attend over a hole
        self.swa = n_swa > 0 and not swa_full
        self.swa_lo: dict[int, int | None] = {s: 0 for s in range(n_seq_max)}
        # KV cells as llama.cpp holds them: a cell id per position; a unified cache shares a copied
        # prefix's cells between sequences, and has n_ctx_seq x n_seq_max cells in all
        self.cells: dict[int, list[int]] = {s: [] for s in range(n_seq_max)}
        self._next_cell = 0
        self.max_cells_used = 0
        self.scripts: dict[int, list[int]] = {}
        self.batches = []
        self.copies = []
        self.shifts: list[tuple[int, int, int, int]] = []  # (slot, p0, p1, delta) of each seq_add
        self.samplers = []
        self.nan_slots: set[int] = set()
        self.embed_batches: list[list[list[int]]] = []
        self._out: dict[int, int] = {}  # batch index -> slot, of the last decode
        self.saved: list[tuple[int, int]] = []  # (slot, tokens) of each state copied out
        self.restored: list[tuple[int, int]] = []  # (slot, tokens) of each state restored
        self.media_decoded: list[tuple[int, int, int]] = []  # (slot, position, length) of each image decoded

    def decode(self, entries):
        assert 0 < len(entries) <= self.meta.n_batch
        self._out = {}
        for i, e in enumerate(entries):
            assert 0 <= e.seq_id < self.meta.n_seq_max
            assert e.pos == self.next_pos(e.seq_id), f"slot {e.seq_id}: pos {e.pos} after {self.next_pos(e.seq_id)}"
            assert e.pos < self.meta.n_ctx_seq
            assert all(k == self.lora for k in self.kv_lora[e.seq_id]), \
                f"slot {e.seq_id}: KV computed under LoRA sets {set(self.kv_lora[e.seq_id])}, decoded under {self.lora}"
            if self.swa and e.pos > 0:
                lo = self.swa_lo[e.seq_id]
                assert lo is not None and lo <= max(0, e.pos - self.meta.n_swa), \
                    f"slot {e.seq_id}: the SWA window of pos {e.pos} is lost (held from {lo})"
            self.kv[e.seq_id].append(e.token)
            self.pos[e.seq_id].append(e.pos)
            self.ends[e.seq_id].append(e.pos + 1)
            self.kv_lora[e.seq_id].append(self.lora)
            self.cells[e.seq_id].append(self._next_cell)
            self._next_cell += 1
            if e.logits:
                self._out[i] = e.seq_id
        if self.swa:  # cells out of every later query's window are overwritten
            for e in entries:
                self.swa_lo[e.seq_id] = max(self.swa_lo[e.seq_id] or 0, e.pos + 1 - self.meta.n_swa)
        used = self.cells_used()  # llama_decode returns 1 when it finds no free cells
        assert used <= self.meta.n_ctx_seq * self.meta.n_seq_max, f"{used} KV cells in use"
        self.max_cells_used = max(self.max_cells_used, used)
        self.batches.append(list(entries))
        self.lora_sets.append(self.lora)

    def set_lora(self, lora):
        assert all(0 <= i < len(self.meta.lora) for i, _ in lora), f"LoRA set {lora}: unknown adapter"
        self.lora = tuple(lora)

    def next_pos(self, seq_id):
        """The position the next token of ``seq_id`` takes (llama.cpp: one past the largest held; after an
        M-RoPE image its ``n_pos``)."""
        return self.ends[seq_id][-1] if self.ends[seq_id] else 0

    def decode_media(self, span, seq_id):
        """An image's placeholder ids enter the slot's KV at their positions, as libmtmd's embeddings would
        (an M-RoPE image's, ``chunk.shared``, all at its first position)."""
        from skippy.engine.runtime.media import placeholder_ids

        assert span.start == len(self.kv[seq_id]), f"slot {seq_id}: image at {span.start} after {len(self.kv[seq_id])}"
        assert span.pos == self.next_pos(seq_id), \
            f"slot {seq_id}: image at pos {span.pos} after {self.next_pos(seq_id)}"
        for i, token in enumerate(placeholder_ids(span.key, span.n)):
            self.pos[seq_id].append(span.pos if span.chunk.shared else span.pos + i)
            self.ends[seq_id].append(span.end_pos if span.chunk.shared else span.pos + i + 1)
            self.kv[seq_id].append(token)
            self.kv_lora[seq_id].append(self.lora)
            self.cells[seq_id].append(self._next_cell)
            self._next_cell += 1
        self._out = {}
        self.media_decoded.append((seq_id, span.start, span.n))

    def logits(self, index):
        import numpy as np

        assert index in self._out
        if self._out[index] in self.nan_slots:
            return np.full(N_VOCAB, np.nan, dtype=np.float32)
        x = np.zeros(N_VOCAB, dtype=np.float32)
        x[FILLER] = 3.0
        x[7] = 1.0
        return x

    def output_logits(self, indices):
        import numpy as np

        return np.stack([self.logits(i) for i in indices])

    def new_sampler(self, params):
        if params.grammar == "bad":
            raise ValueError("grammar refused")
        s = FakeSampler(self.scripts.get(params.seed, []))
        self.samplers.append(s)
        return s

    def sample(self, sampler, index):
        assert index in self._out
        return sampler.script.pop(0) if sampler.script else FILLER

    def accept(self, sampler, token):
        """A forced token (the reasoning budget's): recorded, nothing sampled."""
        sampler.forced.append(token)

    def free_sampler(self, sampler):
        assert not sampler.freed
        sampler.freed = True

    def embed(self, inputs):
        """The embedding context, checked as llama.cpp would take the batch; a vector per input:
        (first token, length, sum), or with pooling ``none`` one per token: (token, position, length).
        An input holding token 99 makes llama.cpp fail the whole batch."""
        import numpy as np

        info = self.meta.embeddings
        assert info is not None and info.usable  # vectors, or a reranker's scores
        assert 0 < len(inputs) <= info.n_seq_max and all(inputs)
        assert sum(len(t) for t in inputs) <= info.n_ctx
        self.embed_batches.append([list(t) for t in inputs])
        if any(99 in t for t in inputs):
            raise RuntimeError("llama_decode of the embedding batch failed with code -3")
        if info.per_token:
            return np.array([[tok, pos, len(t)] for t in inputs for pos, tok in enumerate(t)], dtype=np.float32)
        return np.array([[t[0], len(t), sum(t)] for t in inputs], dtype=np.float32)

    def cells_used(self):
        return len({c for cells in self.cells.values() for c in cells})

    def seq_rm(self, seq_id, p0=-1, p1=-1):
        if p0 < 0:
            self.kv[seq_id] = []
            self.pos[seq_id], self.ends[seq_id] = [], []
            self.kv_lora[seq_id] = []
            self.cells[seq_id] = []
            self.swa_lo[seq_id] = 0
            return True
        if self.meta.is_recurrent:
            return False
        if p1 >= 0:  # a range inside the sequence (--cache-reuse moves what follows it down)
            assert not self.swa and not any(e - p > 1 for p, e in zip(self.pos[seq_id], self.ends[seq_id], strict=True))
            keep = [i for i, p in enumerate(self.pos[seq_id]) if not p0 <= p < p1]
            for held in (self.kv, self.pos, self.ends, self.kv_lora, self.cells):
                held[seq_id] = [held[seq_id][i] for i in keep]
            return True
        i = self._cells_before(seq_id, p0)
        assert i == 0 or p0 >= self.ends[seq_id][i - 1], \
            f"slot {seq_id}: removing from pos {p0} keeps an image taking positions up to {self.ends[seq_id][i - 1]}"
        for held in (self.kv, self.pos, self.ends, self.kv_lora, self.cells):
            del held[seq_id][i:]
        lo = self.swa_lo[seq_id]
        if self.swa and self.kv[seq_id] and (lo is None or p0 <= lo):
            self.swa_lo[seq_id] = None  # the SWA layers held only positions >= p0
        elif not self.kv[seq_id]:
            self.swa_lo[seq_id] = 0
        return True

    def put_tokens(self, seq_id, tokens):
        """Sequence ``seq_id``'s KV now holds text ``tokens`` at positions 0.. (what a state file restores)."""
        self.seq_rm(seq_id)
        self.kv[seq_id] = list(tokens)
        self.pos[seq_id] = list(range(len(tokens)))
        self.ends[seq_id] = [p + 1 for p in self.pos[seq_id]]
        self.kv_lora[seq_id] = [self.lora] * len(tokens)
        self.cells[seq_id] = list(range(self._next_cell, self._next_cell + len(tokens)))
        self._next_cell += len(tokens)

    def seq_add(self, seq_id, p0, p1, delta):
        """Move the cells at positions [p0, p1) by ``delta``; llama.cpp's positions must stay distinct, and
        here increasing along the cells (what --cache-reuse does keeps them so)."""
        assert self.meta.can_shift and not self.meta.kv_unified
        self.shifts.append((seq_id, p0, p1, delta))
        for i, p in enumerate(self.pos[seq_id]):
            if p0 <= p < p1:
                self.pos[seq_id][i] += delta
                self.ends[seq_id][i] += delta
        pos = self.pos[seq_id]
        assert all(a < b for a, b in zip(pos, pos[1:], strict=False)), f"slot {seq_id}: positions {pos} after a shift"

    def _cells_before(self, seq_id, p0):
        """How many of ``seq_id``'s cells hold a position below ``p0`` (positions never decrease along the cells)."""
        return sum(1 for p in self.pos[seq_id] if p < p0)

    def seq_pos_min(self, seq_id):
        lo = self.swa_lo[seq_id]
        return -1 if not self.kv[seq_id] or lo is None else lo

    #: bytes of a fake state per token held (the budget tests count them)
    STATE_BYTES = 8

    def state_seq_get_data(self, seq_id):
        """The sequence's state as llama.cpp would copy it: here its tokens and SWA window, serialized."""
        assert self.kv[seq_id], "a checkpoint of an empty sequence"
        self.saved.append((seq_id, len(self.kv[seq_id])))
        head = json.dumps([self.kv[seq_id], self.swa_lo[seq_id], self.kv_lora[seq_id], self.pos[seq_id],
                           self.ends[seq_id]]).encode()
        return head.ljust(self.STATE_BYTES * len(self.kv[seq_id]) + len(head), b" ")

    def state_seq_set_data(self, seq_id, data):
        tokens, lo, loras, pos, ends = json.loads(data)
        self.seq_rm(seq_id)
        self.restored.append((seq_id, len(tokens)))
        self.kv[seq_id] = list(tokens)
        self.pos[seq_id], self.ends[seq_id] = pos, ends
        self.kv_lora[seq_id] = [tuple(tuple(p) for p in k) for k in loras]
        self.cells[seq_id] = list(range(self._next_cell, self._next_cell + len(tokens)))
        self._next_cell += len(tokens)
        self.swa_lo[seq_id] = lo
        return True

    def seq_cp(self, src, dst, n=None):
        assert not self.kv[dst], "copy into an empty sequence"
        self.swa_lo[dst] = self.swa_lo[src] if n is None or (self.swa_lo[src] or 0) < n else None
        if n is None:
            self.copies.append((src, dst))
            self.kv[dst] = list(self.kv[src])
            self.pos[dst], self.ends[dst] = list(self.pos[src]), list(self.ends[src])
            self.kv_lora[dst] = list(self.kv_lora[src])
            if self.meta.kv_unified:  # shared cells
                self.cells[dst] = list(self.cells[src])
            else:  # another stream: new cells
                self.cells[dst] = list(range(self._next_cell, self._next_cell + len(self.kv[src])))
                self._next_cell += len(self.kv[src])
            return
        assert self.meta.kv_unified, "llama.cpp aborts on a partial copy between streams"
        assert 0 < n <= self.next_pos(src)  # positions [0, n)
        i = self._cells_before(src, n)
        assert i == 0 or n >= self.ends[src][i - 1], f"a copy of positions [0, {n}) cuts an image of slot {src}"
        self.copies.append((src, dst, i))
        for held in (self.kv, self.pos, self.ends, self.kv_lora, self.cells):
            held[dst] = held[src][:i]


class Clock:
    """A fake ``clock`` for :class:`~skippy.engine.scheduling.core.SchedulerCore`: a millisecond later
    at each call."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 0.001
        return self.t


def make(n_seq_max=2, *, hooks=False, recurrent=False, n_ctx_seq=256, unified=False, embeddings=None, n_swa=0,
         swa_full=False, lora=(), n_batch=64, **config):
    """A :class:`FakeRuntime` (``n_seq_max`` slots, its other shape arguments) and a
    :class:`~skippy.engine.scheduling.core.SchedulerCore` over it with a :class:`Clock` (``lora``: the paths of
    its LoRA adapters, ``meta.lora``); ``config``: the
    fields of its :class:`~skippy.engine.scheduling.config.SchedulerConfig` (default here 64 step tokens,
    8 requests queued). ``n_batch``: the fake's (a prefill with no stream decoding takes that many tokens
    a step, not ``step_tokens``)."""
    from skippy.engine.scheduling.config import SchedulerConfig
    from skippy.engine.scheduling.core import SchedulerCore

    rt = FakeRuntime(n_seq_max=n_seq_max, n_ctx_seq=n_ctx_seq, recurrent=recurrent, unified=unified,
                     embeddings=embeddings, n_swa=n_swa, swa_full=swa_full, lora=lora, n_batch=n_batch)
    core = SchedulerCore(rt, SchedulerConfig(**{"step_tokens": 64, "max_queue": 8, **config}), hooks=hooks,
                         clock=Clock())
    return rt, core


def req(rid, prompt, max_tokens=4, *, script=None, seed=None, **kw):
    """A :class:`~skippy.engine.scheduling.events.SeqRequest` (its sampler's seed, and so the fake's
    script, is ``rid`` unless ``seed`` is given; ``params``: more sampling parameters)."""
    from skippy.engine.sampling.params import SamplingParams
    from skippy.engine.scheduling.events import SeqRequest

    params = SamplingParams(seed=rid if seed is None else seed, **kw.pop("params", {}))
    return SeqRequest(rid, list(prompt), params, max_tokens, **kw)


def step(rt, core, outputs=None):
    """One plan/execute/update; returns the outputs (admission's included) or None when nothing decoded."""
    from skippy.engine.scheduling.decode import execute

    plan = core.plan()
    out = list(plan.outputs)
    if plan.empty:
        if outputs is not None:
            outputs += out
        return None if not out else out
    out += core.update(plan, execute(rt, plan))
    if outputs is not None:
        outputs += out
    return out


def run(rt, core, limit=200):
    """Step until nothing decodes; returns every output."""
    outputs = []
    for _ in range(limit):
        if step(rt, core, outputs) is None:
            return outputs
    raise AssertionError("did not settle")


def tokens_of(outputs, rid):
    """The tokens request ``rid`` was sent, in order."""
    from skippy.engine.scheduling.events import TokenEvent

    return [ev.token for r, ev in outputs if r == rid and isinstance(ev, TokenEvent)]


def finish_of(outputs, rid) -> FinishEvent:
    """Request ``rid``'s one finish event."""
    from skippy.engine.scheduling.events import FinishEvent

    [fin] = [ev for r, ev in outputs if r == rid and isinstance(ev, FinishEvent)]
    return fin


PROMPT = list(range(100, 140))  # 40 tokens, > MIN_REUSE (skippy.engine.scheduling.prefix)


@functools.cache
def fixture_template(stem: str) -> Any:
    """The chat-template fixture ``stem`` (``tests.paths.CHAT_TEMPLATES``) as a
    :class:`~skippy.engine.chat.prepare.PreparedTemplate` with ``<s>`` / ``</s>``, built once per test process."""
    from skippy.engine.chat.prepare import PreparedTemplate
    from tests.paths import CHAT_TEMPLATES

    source = (CHAT_TEMPLATES / f"{stem}.jinja").read_text(encoding="utf-8")
    return PreparedTemplate.build(source, bos_token="<s>", eos_token="</s>")


class ByteVocab:
    """A byte-level vocabulary for llguidance (token ``i < 256`` is byte ``i``; then end of generation, then
    ``specials``, which llguidance holds special: no text matches them), to run a constraint's grammar over a
    text without a model: :meth:`accepts`, :meth:`refused_at`."""

    def __init__(self, specials: tuple[str, ...] = ()) -> None:
        from llguidance import LLTokenizer, TokenizerWrapper

        self.specials = {text: 257 + i for i, text in enumerate(specials)}
        outer = self

        class _Tokenizer:
            eos_token_id = 256
            bos_token_id = None
            tokens = [bytes([i]) for i in range(256)] + [b"\xff<eos>"] + [b"\xff" + s.encode() for s in specials]
            special_token_ids = [256, *outer.specials.values()]

            def __call__(self, text: bytes) -> list[int]:
                return list(text)

        self.tokenizer = LLTokenizer(TokenizerWrapper(_Tokenizer()), slices=[])

    def encode(self, text: str) -> list[int]:
        """``text`` as tokens, each of :attr:`specials` as its one token."""
        out: list[int] = []
        i = 0
        while i < len(text):
            special = next((s for s in self.specials if text.startswith(s, i)), None)
            if special is not None:
                out.append(self.specials[special])
                i += len(special)
            else:
                out.extend(text[i].encode())
                i += 1
        return out

    def refused_at(self, grammar: str, text: str) -> int | None:
        """The index of the first token of ``text`` that ``grammar`` refuses, else ``None`` (also raises
        ``ValueError`` when llguidance cannot compile ``grammar`` for this vocabulary)."""
        from llguidance import LLMatcher

        matcher = LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        tokens = self.encode(text)
        n = matcher.validate_tokens(tokens)
        return None if n == len(tokens) else n

    def accepts(self, grammar: str, text: str) -> bool:
        """True when ``grammar`` takes all of ``text`` and may end there (end of generation allowed)."""
        from llguidance import LLMatcher

        matcher = LLMatcher(self.tokenizer, grammar, log_level=0)
        tokens = self.encode(text)
        return matcher.validate_tokens(tokens) == len(tokens) and matcher.consume_tokens(tokens) \
            and matcher.is_accepting()


def streamed_calls(chunks: list) -> dict[int, dict]:
    """Tool calls reassembled from deltas: the first delta of each index carries id/type/name."""
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                if tc.index not in calls:
                    assert tc.id and tc.type == "function" and tc.function.name
                    calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
                else:
                    assert tc.id is None and tc.function.name is None
                calls[tc.index]["arguments"] += tc.function.arguments or ""
    return calls
