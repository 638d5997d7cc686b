"""LangChain's ``ChatOllama`` and LlamaIndex's ``Ollama`` against the real server's Ollama API (/api/chat).

Both frameworks talk to Ollama through the official ``ollama`` client; they are the apps that ship only an
Ollama connector. Each is driven as its documentation shows: invoke / complete, stream, and tools bound to
the model (the Qwen 2.5 template, whose native ``<tool_call>`` format the server parses).
Sampling is greedy (``temperature=0``).
"""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_ollama import ChatOllama
from llama_index.core.llms import ChatMessage
from llama_index.llms.ollama import Ollama

from tests.support import Server

MODEL = "smollm2:135m"


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"It is sunny in {city}."


def chat_model(srv: Server, **kw) -> ChatOllama:
    return ChatOllama(model=MODEL, base_url=srv.base_url, temperature=0, num_predict=16, **kw)


def test_langchain_invoke_answers_with_usage(server: Server) -> None:
    reply = chat_model(server).invoke([HumanMessage("Name a colour of the sky.")])
    assert isinstance(reply, AIMessage) and reply.content.strip()
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["input_tokens"] > 0 and 0 < reply.usage_metadata["output_tokens"] <= 16
    assert reply.response_metadata.get("done_reason") in ("stop", "length")


def test_langchain_stream_is_the_invoke_text(server: Server) -> None:
    question = [HumanMessage("Count from 1 to 5.")]
    whole = chat_model(server).invoke(question).content
    chunks = list(chat_model(server).stream(question))
    assert len(chunks) > 2, "one chunk per token, not one at the end"
    assert "".join(c.content for c in chunks) == whole


def test_langchain_bind_tools_and_a_tool_history(qwen_server: Server) -> None:
    """bind_tools sends the tools; a tool-call history as LangChain writes it (an AIMessage with tool_calls, a
    ToolMessage) renders through the native Qwen template and the model answers. (LangChain's ChatOllama has
    no tool_choice, and a 135M model does not call on its own reliably: the parsing of a call into Ollama's
    shape is checked with a forced call in test_ollama.py.)"""
    llm = chat_model(qwen_server).bind_tools([get_weather])
    ask = [HumanMessage("What is the weather in Paris?")]
    first = llm.invoke(ask)
    assert isinstance(first, AIMessage) and (first.content or first.tool_calls)
    for call in first.tool_calls:
        assert call["name"] == "get_weather" and isinstance(call["args"], dict)
    called = AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1"}])
    result = ToolMessage(get_weather.invoke({"city": "Paris"}), tool_call_id="call_1")
    final = llm.invoke([*ask, called, result])
    assert isinstance(final, AIMessage) and final.usage_metadata and final.usage_metadata["output_tokens"] > 0


def test_llama_index_complete_chat_and_stream(server: Server) -> None:
    llm = Ollama(model=MODEL, base_url=server.base_url, temperature=0, request_timeout=120,
                 additional_kwargs={"num_predict": 16}, context_window=2048)
    text = llm.complete("The capital of France is").text
    assert text.strip()
    streamed = "".join(part.delta for part in llm.stream_complete("The capital of France is"))
    assert streamed == text
    reply = llm.chat([ChatMessage(role="user", content="Name a colour of the sky.")])
    assert reply.message.role == "assistant" and reply.message.content.strip()


@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_unknown_model_is_an_error_the_framework_raises(server: Server, framework: str) -> None:
    import ollama

    with pytest.raises(ollama.ResponseError) as info:
        if framework == "langchain":
            ChatOllama(model="no-such-model:1b", base_url=server.base_url).invoke("hi")
        else:
            Ollama(model="no-such-model:1b", base_url=server.base_url, request_timeout=60,
                   context_window=2048).complete("hi")
    assert info.value.status_code == 404 and "not found" in info.value.error
    json.dumps(info.value.error)  # a plain message, not a traceback
