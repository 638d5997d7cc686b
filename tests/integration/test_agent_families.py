"""The late-2026 agent families' native tool calls (issue 41), and Mistral's, on the real server.

SmolLM2-135M is served with each family's own chat template (the fixtures): the server detects the
family's format at load (``/props``), a named ``tool_choice`` makes the model write one call in the
family's syntax under the format's grammar, and the reply carries it as OpenAI ``tool_calls``, the same
call streamed and not; the call and its result then render back through the template for the next turn.
The families' markers are plain text in SmolLM2's vocabulary, which is all the grammar and parser need.
Mistral's templates refuse tool-call ids other than 9 alphanumeric characters: the server's own ids then have
that form, so the next turn renders.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.paths import CHAT_TEMPLATES
from tests.support import ASK, NAMED, WEATHER, Server, check_call, openai_client, streamed_calls

#: fixture template -> the chat format the server must detect
FAMILIES = {
    "deepseek-ai-DeepSeek-V4": "deepseek_v4",
    "MiniMax-M2": "minimax_m2",  # its template always opens <think>: a reasoning budget closes it
    "MiniMax-M3": "minimax_m3",
    "google-gemma-4-31B-it": "gemma4",
    "Kimi-K3": "kimi_k3",
    "GigaChat3.1-10B-A1.8B": "gigachat3_1",
    "openbmb-MiniCPM5-1B": "minicpm5",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral_nemo",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral_small_3_2",
    "tencent-Hy3": "hy3",
    "upstage-Solar-Open-100B": "solar_open",  # its reasoning is a message the grammar lets come first
}


#: WEATHER with a bounded city: each family's grammar ends the value within 24 characters, so the call ends
#: whatever SmolLM2 would write there (under MiniMax M2's template its greedy city never ends)
BOUNDED = {"type": "function", "function": {**WEATHER["function"], "parameters": {
    **WEATHER["function"]["parameters"], "properties": {**WEATHER["function"]["parameters"]["properties"],
                                                        "city": {"type": "string", "maxLength": 24}}}}}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    template = CHAT_TEMPLATES / f"{request.param}.jinja"
    with Server(["--parallel", "2", "--n-ctx", "4096", "--chat-template", str(template)],
                tmp_path_factory.mktemp("family") / "server.log") as srv:
        yield request.param, srv


def test_named_call_in_the_family_syntax_streamed_and_not(family_server) -> None:
    stem, srv = family_server
    props = httpx.get(srv.base_url + "/props", timeout=30).json()
    assert json.dumps(props).count(FAMILIES[stem]) >= 1, "the family's format is reported"
    client = openai_client(srv.base_url)
    kwargs = dict(model="m", messages=ASK, tools=[BOUNDED], tool_choice=NAMED, temperature=0, max_tokens=400,
                  # thinking off (Kimi K3's template names the variable `thinking`); where the template always
                  # opens the block (MiniMax M2) the budget's forced close ends SmolLM2's reasoning, and the
                  # forced-call grammar reads that close (it would wait for one forever otherwise)
                  extra_body={"cache_prompt": False, "thinking_budget_tokens": 8,
                              "chat_template_kwargs": {"enable_thinking": False, "thinking": False}})
    reply = client.chat.completions.create(**kwargs)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    check_call(call.function.name, call.function.arguments)
    assert "<" not in (choice.message.content or ""), "none of the family's syntax leaks into content"

    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    calls = streamed_calls(chunks)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        (call.function.name, json.loads(call.function.arguments))]

    # the call and its result render back through the family's template: the next turn answers
    follow = client.chat.completions.create(model="m", temperature=0, max_tokens=16, tools=[WEATHER], messages=[
        *ASK, {"role": "assistant", "content": "", "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}])
    assert follow.choices[0].finish_reason in ("stop", "length", "tool_calls")
    prompt = httpx.post(srv.base_url + "/apply-template", timeout=30, json={"messages": [
        *ASK, {"role": "assistant", "content": "", "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}], "tools": [WEATHER]}).json()["prompt"]
    assert call.function.name in prompt and "sunny, 21 C" in prompt
