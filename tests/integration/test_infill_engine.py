"""Fill-in-the-middle through the embedded Engine on the real model, with FIM tokens declared.

SmolLM2-135M has no FIM prefix / suffix / middle tokens (the server answers 400, see
test_choices.py), so here its runtime's metadata declares three of its control tokens as
FIM tokens: the model is no infiller, but the whole path runs for real (prompt assembly,
prefill, decoding, the llama-server ``/infill`` reply and stream, ``suffix`` on completions).
"""

from __future__ import annotations

import attrs
import pytest
import trio

import skippy
from skippy import CompletionRequest, EngineConfig
from skippy.engine.infill import ExtraChunk, format_infill
from skippy.engine.protocols.llama_server.types import InfillExtra, InfillRequest
from skippy.engine.runtime.base import FimTokens
from skippy.models import ensure_model

FIM = FimTokens(pre=6, suf=7, mid=8)  # <filename>, <gh_stars>, <issue_start>: control tokens of SmolLM2


@pytest.fixture
async def engine():
    from skippy.engine.runtime.llama import LlamaRuntime

    path = str(ensure_model("SmolLM2-135M-Instruct"))
    runtime = await trio.to_thread.run_sync(lambda: LlamaRuntime(path, n_ctx_seq=1024, n_seq_max=2))
    runtime.meta = attrs.evolve(runtime.meta, fim=FIM)
    try:
        async with skippy.open_engine(EngineConfig(model=path, parallel=2, n_ctx=1024), runtime=runtime) as eng:
            yield eng
    finally:
        runtime.close()


def no_end(engine) -> dict[str, float]:
    return {str(t): -100.0 for t in engine.meta.eog_ids}  # the model cannot end before its token limit


def expected_prompt(engine, prefix: str, suffix: str, **kw) -> list[int]:
    vocab = engine.runtime.vocab
    return format_infill(lambda t: vocab.tokenize(t, add_special=False, parse_special=False), FIM,
                         prefix=prefix, suffix=suffix, n_batch=engine.meta.n_batch, n_ctx=engine.meta.n_ctx_seq, **kw)


async def test_infill_reply_and_stream(engine) -> None:
    req = InfillRequest(input_prefix="def add(a, b):\n    ", input_suffix="\n\nprint(add(1, 2))\n",
                        input_extra=[InfillExtra(text="x = 1\n", filename="util.py")], n_predict=6, temperature=0,
                        logit_bias=no_end(engine))
    [reply] = await engine.infill(req)
    prompt = expected_prompt(engine, req.input_prefix, req.input_suffix, extra=[ExtraChunk("x = 1\n", "util.py")],
                             n_predict=6)
    assert reply.stop is True and reply.tokens_evaluated == len(prompt)
    assert reply.tokens_predicted == 6 and reply.stop_type == "limit" and reply.content
    events = [e async for e in await engine.infill_stream(req)]
    assert all(not e.stop for e in events[:-1]) and events[-1].stop is True
    assert "".join(e.content for e in events) == reply.content
    assert events[-1].tokens_predicted == 6


async def test_completions_suffix_is_a_fim_prompt(engine) -> None:
    prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"
    reply = await engine.completion(CompletionRequest(prompt=prefix, suffix=suffix, max_tokens=4, temperature=0,
                                                      echo=True, logit_bias=no_end(engine)))
    assert reply.usage.prompt_tokens == len(expected_prompt(engine, prefix, suffix))
    assert reply.choices[0].text.startswith(prefix)  # echo: the prompt as given, not the FIM layout
    [same] = await engine.infill(InfillRequest(input_prefix=prefix, input_suffix=suffix, n_predict=4, temperature=0,
                                                 logit_bias=no_end(engine)))
    assert reply.choices[0].text == prefix + same.content
