"""Continued assistant messages (sans-IO): which part is continued, where the prompt is cut, and the reply's
reasoning_content, with real templates (llama.cpp's ``continue_final_message``, llama-server's prefill)."""

from __future__ import annotations

import pytest

from skippy.engine.chat.continuation import CONTENT, REASONING, continuation
from skippy.engine.chat.prepare import PreparedTemplate, make_output_parser, render_chat
from skippy.engine.errors import InvalidRequest
from skippy.engine.output.generation import Done, Generation, GenerationOptions, Piece
from skippy.engine.protocols.openai.types import ChatCompletionRequest, Message, message_dicts
from skippy.engine.sampling.params import SamplingParams
from skippy.engine.scheduling.events import FinishEvent, TokenEvent
from tests.support import check_invariant, fixture_template

USER = Message("user", "Why is the sky blue?")
THINKING = Message("assistant", "", reasoning_content="Let me think")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _render(stem: str, *messages: Message, **fields):
    return render_chat(fixture_template(stem), ChatCompletionRequest(messages=[USER, *messages], **fields))


def _mode(*messages: Message, **fields) -> str | None:
    req = ChatCompletionRequest(messages=[USER, *messages], **fields)
    return continuation(req, message_dicts(req.messages))


def test_the_continued_part_follows_llama_cpp_s_auto_rule_and_llama_server_s_names() -> None:
    assert _mode(THINKING) == REASONING  # reasoning and no content: the reasoning goes on
    assert _mode(Message("assistant", None, reasoning_content="Let me think")) == REASONING
    assert _mode(Message("assistant", "It is", reasoning_content="Let me think")) == CONTENT
    assert _mode(Message("assistant", "It is")) == CONTENT
    assert _mode(Message("assistant", "", reasoning_content="")) == CONTENT
    assert _mode(THINKING, continue_final_message=True) == REASONING
    assert _mode(THINKING, continue_final_message="content") == CONTENT
    assert _mode(Message("assistant", "It is"), continue_final_message="reasoning_content") == REASONING
    assert _mode(THINKING, continue_final_message=False) is None
    assert _mode(THINKING, add_generation_prompt=False) is None
    assert _mode() is None
    assert _mode(Message("assistant", "", tool_calls=[{"id": "c", "type": "function", "function": {
        "name": "f", "arguments": "{}"}}])) is None
    with pytest.raises(InvalidRequest) as info:
        _mode(THINKING, continue_final_message="reasoning")
    assert info.value.param == "continue_final_message"
    with pytest.raises(InvalidRequest) as info:
        _mode(continue_final_message="content")
    assert info.value.param == "continue_final_message"


@pytest.mark.parametrize(("stem", "tail"), [
    # as the template renders the message, cut where its reasoning begins
    ("ByteDance-Seed-OSS", "<seed:bos>assistant\n<seed:think>Let me think"),
    ("MiniMax-M3", "]~b]ai\n<mm:think>Let me think"),
    ("Qwen-Qwen3-0.6B", "<|im_start|>assistant\n<think>\nLet me think"),
    # the template leaves the message's reasoning out: its generation prompt opens the block
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "<｜Assistant｜><think>\nLet me think"),
    # neither: the family's opener after the generation prompt, as llama.cpp writes it
    ("moonshotai-Kimi-K2", "<|im_assistant|>assistant<|im_middle|><think>Let me think"),
    ("google-gemma-4-31B-it", "<|turn>model\n<|channel>thought\nLet me think"),
    ("openai-gpt-oss-120b", "<|start|>assistant<|channel|>analysis<|message|>Let me think"),
    ("mistralai-Ministral-3-14B-Reasoning-2512", "[/INST][THINK]Let me think"),
])
def test_a_continued_reasoning_ends_the_prompt_inside_its_thinking_block(stem: str, tail: str) -> None:
    rendered = _render(stem, THINKING)
    assert rendered.prompt.endswith(tail)
    plan = rendered.plan
    assert plan.thinking_forced_open and plan.prefill_reasoning == "Let me think"
    assert tail.endswith(plan.thinking_opener + "Let me think")


def test_the_prefilled_reasoning_is_continued_as_sent() -> None:
    """Not trimmed, as llama.cpp appends ``reasoning_content``: Qwen3's template strips it where it renders it."""
    prompt = _render("Qwen-Qwen3-0.6B", Message("assistant", "", reasoning_content="\nLet me think ")).prompt
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\nLet me think ")


def test_a_reasoning_is_left_out_where_no_thinking_block_is_known() -> None:
    """A template without thinking: the reply continues after the generation prompt, as before."""
    tmpl = PreparedTemplate.build(CHATML)
    rendered = render_chat(tmpl, ChatCompletionRequest(messages=[USER, THINKING]))
    assert rendered.prompt.endswith("<|im_start|>assistant\n")
    assert not rendered.plan.thinking_forced_open and rendered.plan.prefill_reasoning == ""
    # Apriel 1.6's block has no tag: its generation prompt opens it with a sentence, which the reasoning follows
    apriel = _render("Apriel-1.6-15b-Thinker-fixed", THINKING)
    assert apriel.prompt.endswith("<|begin_assistant|>\nHere are my reasoning steps:\nLet me think")
    assert apriel.plan.prefill_reasoning == "Let me think"


def test_with_emulated_tools_the_reasoning_is_not_continued() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    rendered = _render("Qwen-Qwen3-0.6B", THINKING, tools=[tool])
    assert not rendered.plan.emulated  # Qwen3 calls natively: continued
    assert rendered.plan.prefill_reasoning == "Let me think"
    emulated = render_chat(fixture_template("Qwen-Qwen3-0.6B"), ChatCompletionRequest(
        messages=[USER, THINKING], tools=[tool]), force_tool_emulation=True)
    assert emulated.plan.emulated and emulated.plan.prefill_reasoning == ""
    assert "Let me think" not in emulated.prompt


def test_a_continued_content_with_reasoning_follows_its_closed_block() -> None:
    """llama.cpp's continuation of a content: the reasoning, its closing tag, then the content; the reply holds
    only what follows (the parser does not start in reasoning, though Ling's generation prompt opens it)."""
    ling = _render("inclusionai-ling-3.0-flash", Message("assistant", "It is", reasoning_content="Let me think"))
    assert ling.prompt.endswith("<role>ASSISTANT</role>\n<think>Let me think</think>It is")
    assert not ling.plan.thinking_forced_open and ling.plan.prefill_reasoning == ""
    qwen = _render("Qwen-Qwen3-0.6B", Message("assistant", "It is", reasoning_content="Let me think"))
    assert qwen.prompt.endswith("<|im_start|>assistant\n<think>\nLet me think\n</think>\n\nIt is")
    # llama-server's "content" for a message with reasoning only: the block closed, the content begins
    named = _render("inclusionai-ling-3.0-flash", THINKING, continue_final_message="content")
    assert named.prompt.endswith("<think>Let me think</think>") and not named.plan.thinking_forced_open


def test_no_text_of_the_conversation_is_taken_for_the_probe_marker() -> None:
    # the probe renders stood the prefill in with a fixed word; a user who wrote it moved the cut and the
    # prefilled reasoning was lost
    for said in ("Hi", "Hi SKIPPY_PREFILL_MARK", "SKIPPY_PREFILL_MARK_0123456789abcdef"):
        rendered = render_chat(fixture_template("Qwen3.5-4B"), ChatCompletionRequest(messages=[
            Message("user", said), Message("assistant", "Sure", reasoning_content="Thought")]))
        assert rendered.prompt.endswith("<think>\nThought\n</think>\n\nSure"), said
        thinking = render_chat(fixture_template("Qwen3.5-4B"), ChatCompletionRequest(messages=[
            Message("user", said), Message("assistant", "", reasoning_content="Thought")]))
        assert thinking.prompt.endswith("<think>\nThought") and thinking.plan.prefill_reasoning == "Thought", said


@pytest.mark.parametrize(("stem", "tail"), [
    ("Qwen3.5-4B", "<|im_start|>assistant\n<think>\n\n</think>\n\nSure, here is"),  # the template's closed block
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "<｜Assistant｜>Sure, here is"),  # its bare assistant header
    ("NVIDIA-Nemotron-Nano-v2", "Assistant\n<think>\n</think>Sure, here is"),  # renders it open: closed here
    ("Qwen-Qwen3-0.6B", "<|im_start|>assistant\nSure, here is"),  # no block opened: as before
])
def test_a_continued_content_never_lands_in_the_block_the_generation_prompt_opens(stem: str, tail: str) -> None:
    """A content prefill on a template whose generation prompt opens a thinking block: the content follows
    the message as the template renders it where that closes the block, else the block closed (llama.cpp
    writes an empty reasoning before a continued content); it went inside the block, so the model took it
    for its thinking."""
    rendered = _render(stem, Message("assistant", "Sure, here is"))
    assert rendered.prompt.endswith(tail)
    assert not rendered.plan.thinking_forced_open and rendered.plan.prefill_reasoning == ""


@pytest.mark.parametrize("stem", ["ByteDance-Seed-OSS", "openai-gpt-oss-120b", "google-gemma-4-31B-it"])
def test_the_reply_s_reasoning_begins_with_the_prefill_streamed_or_not(stem: str) -> None:
    """llama-server parses the generation prompt with the output: the reply's reasoning_content is the
    prefill and its continuation, and the first streamed delta carries the prefill."""
    close = {"ByteDance-Seed-OSS": "</seed:think>", "openai-gpt-oss-120b":
             "<|end|><|start|>assistant<|channel|>final<|message|>", "google-gemma-4-31B-it": "<channel|>"}[stem]
    text = f" about light scattering.{close}Rayleigh scattering."
    for pieces in ([text], list(text)):
        parser = make_output_parser(_render(stem, THINKING).plan)
        deltas = [d for p in pieces for d in parser.feed(p)]
        assert deltas[0].reasoning_content.startswith("Let me think")
        tail, msg = parser.finish()
        check_invariant(deltas + tail, msg)
        assert msg.reasoning_content == "Let me think about light scattering."
        assert msg.content == "Rayleigh scattering."
    parser = make_output_parser(_render(stem, THINKING).plan)  # nothing generated: the prefill is the reply
    tail, msg = parser.finish()
    assert msg.reasoning_content == "Let me think" and msg.content == ""


def test_a_streamed_generation_sends_the_prefill_first() -> None:
    """Through :class:`Generation`: the first piece's deltas begin with the prefilled reasoning."""
    pieces = {1: b" about", 2: b" light", 3: b"</seed:think>", 4: b"Blue."}
    plan = _render("ByteDance-Seed-OSS", THINKING).plan
    gen = Generation(3, [100, 101], SamplingParams(), 16, piece=pieces.__getitem__, parser=make_output_parser(plan),
                     options=GenerationOptions())
    sent = []
    for token in (1, 2, 3, 4):
        item = gen.feed(TokenEvent(token))
        if item is not None:
            assert isinstance(item, Piece)
            sent += item.deltas
    done = gen.feed(FinishEvent("stop", prompt_tokens=2, completion_tokens=4, prompt_ms=1.0, predicted_ms=1.0))
    assert isinstance(done, Done)
    sent += done.deltas
    assert sent[0].reasoning_content.startswith("Let me think")
    assert "".join(d.reasoning_content for d in sent) == "Let me think about light"
    assert "".join(d.content for d in sent) == "Blue."
