"""llama-server's native ``/completion`` replies from a :class:`Generation` (sans-IO builders).

:class:`NativeReply` turns one prompt's :class:`Piece` / :class:`Done` items
into :class:`~skippy.engine.protocols.llama_server.wire.NativeCompletion` objects: stream
chunks (``stop: false``; ``content``, ``tokens``, per-token ``timings``,
``completion_probabilities``, a ``prompt_progress`` chunk) and the final
answer (``stop: true``; ``stop_type``, ``generation_settings``,
``timings``...), in llama-server's shape (``tools/server`` ``server_task_result_cmpl_*``).

``tokens`` follows llama-server's ``send_partial_response`` / ``send_final_response``:
each stream chunk carries the id of the token sampled for it, ``return_tokens`` or
not (its ``content`` is the text that token released: text held back for a split
character or a possible stop string goes out with a later token); the non-streamed
answer carries every generated id only with ``return_tokens``; a stream's final
chunk carries none (they were in the chunks).

``/infill`` answers in the same shape (llama-server runs it as a completion of its fill-in-the-middle
prompt). ``response_fields`` keeps only the named fields of the final answer (:func:`select_fields`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from skippy.engine.output.generation import Done, Generation, Piece
from skippy.engine.protocols.llama_server import wire
from skippy.engine.protocols.openai import translate as openai_translate
from skippy.engine.protocols.openai import wire as openai_wire
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.scheduling.events import TokenEvent

if TYPE_CHECKING:
    from skippy.engine.scheduling.core import SlotInfo

#: the sampler chain as /completion's generation_settings names it (llama.cpp's names)
DEFAULT_SAMPLERS = ("penalties", "top_k", "top_p", "min_p", "temperature")


def generation_settings(params: SamplingParams, *, n_predict: int, stop: Sequence[str] = (), stream: bool = False,
                        n_probs: int = 0, samplers: Sequence[str] = DEFAULT_SAMPLERS,
                        timings_per_token: bool = False, ignore_eos: bool = False,
                        post_sampling_probs: bool | None = None) -> wire.GenerationSettings:
    """llama-server's ``generation_settings`` for ``params`` (``n_predict`` -1: until the context is full;
    ``post_sampling_probs``: the request's, which ``params`` leaves off where no probabilities are asked)."""
    return wire.GenerationSettings(
        seed=params.seed, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
        min_p=params.min_p, repeat_last_n=params.penalty_last_n, repeat_penalty=params.repeat_penalty,
        presence_penalty=params.presence_penalty, frequency_penalty=params.frequency_penalty,
        dynatemp_range=params.dynatemp_range, dynatemp_exponent=params.dynatemp_exponent,
        top_n_sigma=params.top_n_sigma, xtc_probability=params.xtc_probability, xtc_threshold=params.xtc_threshold,
        typical_p=params.typical_p, dry_multiplier=params.dry_multiplier, dry_base=params.dry_base,
        dry_allowed_length=params.dry_allowed_length, dry_penalty_last_n=params.dry_penalty_last_n,
        mirostat=params.mirostat, mirostat_tau=params.mirostat_tau, mirostat_eta=params.mirostat_eta,
        min_keep=params.min_keep, stop=list(stop),
        max_tokens=n_predict, n_predict=n_predict, stream=stream, n_probs=n_probs, ignore_eos=ignore_eos,
        logit_bias=[[float(t), b if math.isfinite(b) else None] for t, b in params.logit_bias],
        grammar=params.grammar or "",
        samplers=list(samplers), timings_per_token=timings_per_token,
        post_sampling_probs=params.post_sampling_probs if post_sampling_probs is None else post_sampling_probs)


class NativeReply:
    """llama-server ``/completion`` replies for one prompt's :class:`Generation`.

    ``index``: the prompt's position in a multi-prompt request; ``prompt_text``: the prompt as text;
    ``settings``: its ``generation_settings``; ``return_tokens`` (the answer's ``tokens``; stream chunks
    carry theirs always), ``n_probs``, ``timings_per_token``, ``return_progress``: the request's fields.
    ``response_fields``: the fields the final answer keeps (``None``: all). ``slot_info()`` gives
    ``(slot, cached prompt tokens)`` of the running sequence (read once, at its first token). ``clock``
    gives seconds (per-token timings). ``n_ctx``: tokens per sequence; an answer that stopped because the
    context was full says ``truncated: true``, as llama-server's (0: never).
    """

    def __init__(self, model: str, generation: Generation, *, prompt_text: str, settings: wire.GenerationSettings,
                 index: int = 0, return_tokens: bool = False, n_probs: int = 0, timings_per_token: bool = False,
                 return_progress: bool = False, response_fields: Sequence[str] | None = None,
                 slot_info: Callable[[], tuple[int, int]] = lambda: (-1, 0),
                 clock: Callable[[], float] = time.perf_counter, n_ctx: int = 0) -> None:
        self.model = model
        self.n_ctx = n_ctx
        self.generation = generation
        self.prompt_text = prompt_text
        self.settings = settings
        self.index = index
        self.return_tokens = return_tokens
        self.n_probs = n_probs
        self.timings_per_token = timings_per_token
        self.return_progress = return_progress
        self.response_fields = response_fields
        self.live = openai_translate.LiveTimings(len(generation.request.prompt), slot_info, clock)
        self._n = 0

    def _probs(self, tokens: Sequence[TokenEvent]) -> list[wire.NativeTokenProb] | wire.UnsetType:
        if not self.n_probs:
            return wire.UNSET
        out = []
        post = self.generation.request.params.post_sampling_probs
        prob = openai_translate.probability
        for ev in tokens:
            tok = openai_translate.token_text(ev, self.generation.shown)
            if post:
                out.append(wire.NativeTokenProb(
                    id=tok.id, token=tok.text, bytes=tok.bytes, prob=prob(tok.logprob),
                    top_probs=[wire.NativeTopProb(id=alt.id, token=alt.text, bytes=alt.bytes, prob=prob(alt.logprob))
                               for alt in tok.top]))
                continue
            top = [wire.NativeTopProb(id=alt.id, token=alt.text, bytes=alt.bytes, logprob=alt.logprob)
                   for alt in tok.top]
            out.append(wire.NativeTokenProb(id=tok.id, token=tok.text, bytes=tok.bytes,
                                            logprob=tok.logprob if tok.logprob is not None else 0.0, top_logprobs=top))
        return out

    def _chunk(self, content: str, tokens: Sequence[TokenEvent]) -> wire.NativeCompletion:
        return wire.NativeCompletion(
            index=self.index, content=content, tokens=[ev.token for ev in tokens],
            stop=False, tokens_predicted=self._n, tokens_evaluated=self.live.n_prompt,
            timings=self.live.timings(self._n) if self.timings_per_token else wire.UNSET,
            completion_probabilities=self._probs(tokens))

    def _progress(self, progress: openai_wire.PromptProgress) -> wire.NativeCompletion:
        return wire.NativeCompletion(index=self.index, content="", stop=False, tokens_predicted=0,
                                     tokens_evaluated=self.live.n_prompt, prompt_progress=progress)

    def observe(self, item: Piece | Done) -> bool:
        """Note one generation item (its first token's time, slot and cached tokens); True for the first token."""
        if not isinstance(item, Piece) or item.progress is not None:
            return False
        self._n += len(item.tokens)
        return self.live.observe()

    def chunks(self, item: Piece | Done) -> list[NativeAnswer]:
        """The stream chunks for one generation item (a :class:`Done` ends with the final answer)."""
        out: list[NativeAnswer] = []
        if isinstance(item, Piece) and item.progress is not None:  # a prefill step: noted, sent where asked
            step = self.live.step(item.progress)
            return [self._progress(step)] if self.return_progress else []
        first = self.observe(item)
        if isinstance(item, Piece):
            if first and self.return_progress and not self.live.stepped:
                out.append(self._progress(self.live.progress()))
            out.append(self._chunk("".join(d.content for d in item.deltas), item.tokens))
            return out
        tail = "".join(d.content for d in item.deltas)
        self._n += len(item.tail)
        if tail or item.tail:
            out.append(self._chunk(tail, item.tail))
        out.append(self.final(item, content=""))
        return out

    def final(self, done: Done, content: str | None = None) -> NativeAnswer:
        """The final answer (:meth:`answer`) with only the ``response_fields`` asked for, if any."""
        answer = self.answer(done, content)
        return answer if self.response_fields is None else select_fields(answer, self.response_fields)

    def answer(self, done: Done, content: str | None = None) -> wire.NativeCompletion:
        """The final answer (``stop: true``); ``content`` defaults to the whole generated text."""
        gen = self.generation
        text = done.message.content if content is None else content
        stop_type: Literal["eos", "word", "limit", "none"]
        if gen.stopping_word:
            stop_type = "word"
        elif done.finish_reason == "length":
            stop_type = "limit"
        else:
            stop_type = "eos" if done.finish_reason == "stop" else "none"
        n = done.counts.completion_tokens
        req = gen.request
        # llama-server's truncated: generation stopped at the end of the context (not at the request's n_predict)
        truncated = done.finish_reason == "length" and 0 < self.n_ctx <= len(req.prompt) + req.max_tokens
        return wire.NativeCompletion(
            index=self.index, content=text,
            tokens=[ev.token for ev in done.tokens] if self.return_tokens and content is None else [],
            id_slot=self.live.slot if self.live.slot >= 0 else done.counts.slot, stop=True, model=self.model,
            tokens_predicted=n,
            tokens_evaluated=done.counts.prompt_tokens, generation_settings=self.settings, prompt=self.prompt_text,
            has_new_line="\n" in done.message.content, truncated=truncated, stop_type=stop_type,
            stopping_word=gen.stopping_word, tokens_cached=done.counts.prompt_tokens + max(0, n - 1),
            timings=openai_translate.timings(done.counts),
            completion_probabilities=self._probs(done.tokens) if content is None else wire.UNSET)


#: A ``/completion`` or ``/infill`` answer: the whole one, or the ``response_fields`` kept (:func:`select_fields`)
NativeAnswer = wire.NativeCompletion | dict[str, Any]


def select_fields(answer: wire.NativeCompletion, paths: Sequence[str]) -> dict[str, Any]:
    """llama-server's ``response_fields`` (its ``json_get_nested_values``): the answer's value at each path,
    under the path itself (``"timings/prompt_n"`` walks into ``timings`` and is one key of the result); a
    path the answer lacks is left out (``[""]`` keeps nothing)."""
    whole = msgspec.to_builtins(answer)
    out: dict[str, Any] = {}
    for path in paths:
        value: Any = whole
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out


def default_generation_settings(n_predict: int = -1, params: SamplingParams | None = None) -> wire.GenerationSettings:
    """llama-server's default ``generation_settings``: of a request that sets nothing (``params``: its sampling
    with the server's defaults; by default llama.cpp's, whose seed is random: ``LLAMA_DEFAULT_SEED``);
    ``n_predict``: the server's ``-n``, -1 until the context is full."""
    return generation_settings(params or SamplingParams(seed=0xFFFFFFFF), n_predict=n_predict)


def slot_views(infos: Sequence[SlotInfo], *, n_ctx: int,
               defaults: wire.GenerationSettings | None = None) -> list[wire.Slot]:
    """``GET /slots``: each slot's state in llama-server's shape (``n_ctx``: tokens per sequence); an idle
    slot shows the default settings (``defaults``, :func:`default_generation_settings`'s by default),
    ``id_task`` -1 and ``n_remain`` -1; ``speculative`` the :class:`SlotInfo`'s."""
    defaults = defaults or default_generation_settings()
    out = []
    for info in infos:
        params = defaults if info.params is None else generation_settings(info.params, n_predict=info.max_tokens)
        running = info.rid is not None
        out.append(wire.Slot(
            id=info.id, n_ctx=n_ctx, speculative=info.speculative, is_processing=running,
            id_task=info.rid if info.rid is not None else -1,
            n_prompt_tokens=info.n_prompt, n_prompt_tokens_cache=info.n_cached, n_kv=info.n_kv, params=params,
            next_token=[wire.SlotNextToken(has_next_token=running,
                                           n_remain=info.max_tokens - info.n_decoded if running else -1,
                                           n_decoded=info.n_decoded)]))
    return out
