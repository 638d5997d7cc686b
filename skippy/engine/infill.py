"""Fill-in-the-middle prompts (sans-IO): llama-server's ``format_infill`` with the vocabulary's FIM tokens.

A FIM-trained model completes the gap between a prefix and a suffix when
they are framed by its special tokens. The layout is llama-server's
(``tools/server/utils.hpp`` ``format_infill``, the repo-level pattern of
Qwen2.5-Coder, arXiv:2409.12186), in its default prefix-suffix-middle order::

    [FIM_REP]myproject\n                       (when the vocabulary has FIM_REP)
    [FIM_SEP]{filename}\n{text}   per input_extra chunk (without FIM_SEP: a "--- snippet ---" line)
    [FIM_SEP]filename\n                        (when the vocabulary has FIM_SEP)
    [BOS][FIM_PRE]{prefix}{prompt}[FIM_SUF]{suffix}[FIM_MID]

The prefix keeps its last ``3 * n_batch / 4`` tokens, the suffix its first
``n_batch / 4 - 2 - len(prompt)``, and the extra context its last
``n_ctx - n_batch - 2 * n_predict`` tokens, as llama-server cuts them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from skippy.engine.errors import InvalidRequest
from skippy.engine.runtime.base import FimTokens

#: llama-server's separator of ``input_extra`` chunks when the vocabulary has no FIM_SEP token.
CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"

#: Text or token ids, as llama-server's ``tokenize_mixed`` takes them.
Mixed = str | Sequence[int]


@attrs.frozen
class ExtraChunk:
    """One ``input_extra`` entry: a file's ``text`` and its ``filename``."""

    text: str = ""
    filename: str = "tmp"


def require_fim(fim: FimTokens, param: str) -> None:
    """Raise :class:`InvalidRequest` (400, ``param``) when the model has no FIM prefix, suffix and middle tokens."""
    if not fim.available:
        raise InvalidRequest("this model's vocabulary has no fill-in-the-middle tokens (FIM prefix, suffix and "
                             "middle), so it cannot infill; use a FIM-trained model (e.g. a coder model)",
                             param=param)


def format_infill(tokenize: Callable[[str], list[int]], fim: FimTokens, *, prefix: Mixed, suffix: Mixed,
                  extra: Sequence[ExtraChunk] = (), prompt: Mixed = "", bos: int | None = None,
                  n_batch: int = 512, n_predict: int = -1, n_ctx: int = 2048) -> list[int]:
    """The token ids of a fill-in-the-middle prompt (see the module docstring).

    ``tokenize(text)`` gives token ids without special tokens; ``prefix``,
    ``suffix`` and ``prompt`` are text or token ids; ``prompt`` is appended to
    the prefix. ``bos`` is prepended before ``FIM_PRE`` when set (the
    vocabulary adds BOS). ``n_predict`` < 0 counts as 0 for the extra budget.
    Raises :class:`InvalidRequest` when ``fim`` lacks prefix, suffix or middle.
    """
    require_fim(fim, "input_prefix")

    def ids(x: Mixed) -> list[int]:
        return tokenize(x) if isinstance(x, str) else list(x)

    tokens_prefix, tokens_suffix, tokens_prompt = ids(prefix), ids(suffix), ids(prompt)
    extra_tokens: list[int] = []
    if fim.rep >= 0:
        extra_tokens += [fim.rep, *tokenize("myproject\n")]
    for chunk in extra:
        if fim.sep >= 0:
            extra_tokens += [fim.sep, *tokenize(chunk.filename + "\n")]
        else:
            extra_tokens += tokenize(CHUNK_SEPARATOR)
        extra_tokens += tokenize(chunk.text)
    if fim.sep >= 0:
        extra_tokens += [fim.sep, *tokenize("filename\n")]
    n_prefix_take = min(len(tokens_prefix), 3 * (n_batch // 4))
    n_suffix_take = min(len(tokens_suffix), max(0, n_batch // 4 - (2 + len(tokens_prompt))))
    n_extra_take = min(max(0, n_ctx - n_batch - 2 * max(n_predict, 0)), len(extra_tokens))
    head = [fim.pre, *tokens_prefix[len(tokens_prefix) - n_prefix_take:], *tokens_prompt]
    tail = [fim.suf, *tokens_suffix[:n_suffix_take]]
    if bos is not None:
        head.insert(0, bos)
    return extra_tokens[len(extra_tokens) - n_extra_take:] + head + tail + [fim.mid]
