"""Prompt tokenization per request: llama.cpp on the whole rendered prompt against the tokenization cache.

Every chat request's prompt is rendered and tokenized again from its first character, though most of it is
the conversation the previous request already had, or a system prompt and tools every request of an agent
shares. llama.cpp's tokenizer costs about a microsecond a token (more with many special tokens: Gemma 3's
vocabulary has 6414, each searched for through the whole text); the server's
:class:`~skippy.engine.runtime.tokenization.TokenizationCache` tokenizes only the pieces no earlier prompt
had. Two workloads, rendered by the model's chat template (``--chat-template`` to use another):

- ``conversation``: one chat that grows a turn at a time (a long system prompt, then ``--turns`` user and
  assistant messages of a few hundred characters), every prompt tokenized once;
- ``fan-out``: ``--turns`` new chats that share the system prompt, each with one user message (a template
  without a system role, Gemma's, opens the first user message with it: no marker between the two, so only
  the growing conversation gains there).

Per model and workload, the median ms per prompt of the raw baseline (``llama_tokenize`` on the whole
prompt, as llama-server does) and of the cache as the server builds it (its self-check included: the first
4 prompts and one in 64 are also tokenized whole), the tokens per prompt, and their ratio. Every prompt's
tokens are checked equal to the baseline's. JSON to ``tokenize-<time>.json`` in ``--out``.

    python bench/bench_tokenize.py [--model NAME|PATH ...] [--system-chars 60000] [--turns 30] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skippy.engine.chat.prepare import PreparedTemplate  # noqa: E402
from skippy.engine.chat.templates import TemplateError  # noqa: E402
from skippy.engine.runtime.tokenization import cache_for  # noqa: E402
from skippy.models import resolve_model  # noqa: E402
from tests.support import VocabOnly  # noqa: E402

OUT = Path(__file__).parent / "out"
DOCS = Path(__file__).resolve().parents[1] / "docs"
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _filler() -> str:
    """Deterministic prose: the repository's documentation pages, in name order."""
    return "\n\n".join(p.read_text() for p in sorted(DOCS.rglob("*.md")))


def _template(path: str, chat_template: str | None) -> PreparedTemplate:
    import llama_cpp

    source = Path(chat_template).read_text() if chat_template and chat_template != "-" else None
    if source is None:
        with VocabOnly(path) as v:
            ptr = llama_cpp.llama_model_chat_template(v.model, None)
            source = ptr.decode() if ptr else CHATML
    return PreparedTemplate.build(source, bos_token="<bos>" if "gemma" in path.lower() else "", eos_token="")


def _prompts(tmpl: PreparedTemplate, system_chars: int, turns: int) -> dict[str, list[str]]:
    text = _filler()
    rnd = random.Random(0)

    def snippet(n: int) -> str:
        at = rnd.randrange(0, len(text) - n)
        return text[at:at + n]

    def render(messages: list[dict[str, str]]) -> str:
        try:
            return tmpl.template.render(messages, add_generation_prompt=True)
        except TemplateError:  # no system role (Gemma's): the system prompt opens the first user message
            first = {"role": "user", "content": messages[0]["content"] + "\n\n" + messages[1]["content"]}
            return tmpl.template.render([first, *messages[2:]], add_generation_prompt=True)

    system = {"role": "system", "content": text[:system_chars]}
    chat = [system]
    grows, fans = [], []
    for _ in range(turns):
        chat.append({"role": "user", "content": snippet(rnd.randint(50, 500))})
        grows.append(render(chat))
        chat.append({"role": "assistant", "content": snippet(rnd.randint(20, 400))})
        fans.append(render([system, {"role": "user", "content": snippet(rnd.randint(50, 500))}]))
    return {"conversation": grows, "fan-out": fans}


def _run(path: str, prompts: list[str]) -> dict[str, float]:
    with VocabOnly(path) as v:
        cache = cache_for(v.vocab)  # as the server builds it: self-check on
        assert cache is not None, "this vocabulary has no tokenization cache"
        whole, cached, tokens = [], [], []
        for prompt in prompts:
            t0 = time.perf_counter()
            want = v.vocab.tokenize(prompt, add_special=True, parse_special=True)
            t1 = time.perf_counter()
            got = cache.tokenize(prompt, True)
            t2 = time.perf_counter()
            assert got == want, "the cache's tokens differ from llama.cpp's"
            whole.append((t1 - t0) * 1e3)
            cached.append((t2 - t1) * 1e3)
            tokens.append(len(want))
        assert not cache.disabled, cache.disabled
    return {"tokens": statistics.median(tokens), "whole_ms": statistics.median(whole),
            "cached_ms": statistics.median(cached), "whole_ms_all": whole, "cached_ms_all": cached}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", help="a catalogue name or a GGUF path (repeat; default SmolLM2 "
                    "and gemma-3-270m)")
    ap.add_argument("--chat-template", action="append", default=[],
                    help="a Jinja file per --model, in order (default or '-': the GGUF's, else ChatML)")
    ap.add_argument("--system-chars", type=int, default=60000, help="the system prompt's length in characters")
    ap.add_argument("--turns", type=int, default=30, help="prompts per workload")
    ap.add_argument("--reps", type=int, default=2, help="runs of the whole table")
    ap.add_argument("--out", type=Path, default=OUT, help="the folder of the JSON (default bench/out)")
    a = ap.parse_args()
    logging.disable(logging.WARNING)  # llama.cpp's double-BOS warning of Gemma's template, once per prompt
    models = a.model or ["SmolLM2-135M-Instruct", "gemma-3-270m"]
    results = []
    print(f"{'rep':>3} {'model':<34} {'workload':<13} {'tokens':>7} {'llama.cpp ms':>13} {'cache ms':>9} {'ratio':>6}")
    for rep in range(a.reps):
        for i, name in enumerate(models):
            path = str(resolve_model(name))
            tmpl = _template(path, a.chat_template[i] if i < len(a.chat_template) else None)
            for workload, prompts in _prompts(tmpl, a.system_chars, a.turns).items():
                r = _run(path, prompts)
                results.append({"rep": rep, "model": Path(path).name, "workload": workload, **r})
                print(f"{rep:>3} {Path(path).name:<34} {workload:<13} {r['tokens']:>7.0f} {r['whole_ms']:>13.2f} "
                      f"{r['cached_ms']:>9.2f} {r['cached_ms'] / r['whole_ms']:>6.3f}")
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"tokenize-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"system_chars": a.system_chars, "turns": a.turns, "results": results}, indent=1))
    print(f"JSON: {path}")


if __name__ == "__main__":
    main()
