"""format_infill: llama-server's fill-in-the-middle layout, over a vocabulary that has FIM tokens.

The default model (SmolLM2-135M) has FIM_REP only, so the server answers 400 there
(tests/integration/test_choices.py); the layout is checked here token by token.
"""

from __future__ import annotations

import pytest

from skippy.engine.errors import InvalidRequest
from skippy.engine.infill import CHUNK_SEPARATOR, ExtraChunk, format_infill, require_fim
from skippy.engine.runtime.base import FimTokens

PRE, SUF, MID, REP, SEP, BOS = 901, 902, 903, 904, 905, 1
CODER = FimTokens(pre=PRE, suf=SUF, mid=MID, rep=REP, sep=SEP)  # Qwen2.5-Coder-like: repo-level tokens
PLAIN = FimTokens(pre=PRE, suf=SUF, mid=MID)  # CodeLlama-like: prefix / suffix / middle only


def tok(text: str) -> list[int]:
    """One token per character (its code point), so a layout reads back as text."""
    return [ord(c) for c in text]


def text(ids: list[int]) -> str:
    names = {PRE: "<PRE>", SUF: "<SUF>", MID: "<MID>", REP: "<REP>", SEP: "<SEP>", BOS: "<BOS>"}
    return "".join(names.get(t, chr(t)) for t in ids)


def test_prefix_suffix_middle_order_with_bos() -> None:
    ids = format_infill(tok, PLAIN, prefix="def f(", suffix="return x", bos=BOS)
    assert text(ids) == "<BOS><PRE>def f(<SUF>return x<MID>"


def test_repo_level_extra_context_and_prompt_after_the_prefix() -> None:
    ids = format_infill(tok, CODER, prefix="a = ", suffix="\nb", prompt="1",
                        extra=[ExtraChunk("x = 1", "util.py"), ExtraChunk("y", "tmp")])
    assert text(ids) == ("<REP>myproject\n<SEP>util.py\nx = 1<SEP>tmp\ny<SEP>filename\n"
                         "<PRE>a = 1<SUF>\nb<MID>")


def test_without_fim_sep_extra_chunks_get_the_snippet_separator() -> None:
    ids = format_infill(tok, PLAIN, prefix="p", suffix="s", extra=[ExtraChunk("ctx")])
    assert text(ids) == CHUNK_SEPARATOR + "ctx<PRE>p<SUF>s<MID>"


def test_token_id_inputs_are_used_as_given() -> None:
    ids = format_infill(tok, PLAIN, prefix=[7, 8], suffix=[9], prompt=[10])
    assert ids == [PRE, 7, 8, 10, SUF, 9, MID]


def test_prefix_suffix_and_extra_are_cut_as_llama_server_cuts_them() -> None:
    # n_batch 16: the prefix keeps its last 12 tokens, the suffix its first 16/4 - 2 - len(prompt) = 1
    ids = format_infill(tok, CODER, prefix="0123456789abcdefXYZ", suffix="stuv", prompt="P", n_batch=16,
                        n_ctx=40, n_predict=8, extra=[ExtraChunk("E" * 30, "f")])
    # the extra context ("...<SEP>f\nEEE...<SEP>filename\n") keeps its last n_ctx - n_batch - 2 * n_predict = 8
    assert text(ids) == "ilename\n<PRE>789abcdefXYZP<SUF>s<MID>"


def test_a_vocabulary_without_fim_tokens_is_a_400_naming_the_field() -> None:
    for fim in (FimTokens(), FimTokens(rep=4), FimTokens(pre=1, suf=2)):
        assert not fim.available
        with pytest.raises(InvalidRequest) as exc:
            require_fim(fim, "suffix")
        assert exc.value.param == "suffix" and "fill-in-the-middle" in str(exc.value)
        with pytest.raises(InvalidRequest):
            format_infill(tok, fim, prefix="a", suffix="b")
    assert CODER.available
