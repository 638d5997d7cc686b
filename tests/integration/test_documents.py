"""Documents on the real server: a PDF (made here, :mod:`tests.pdfs`) sent as OpenAI chat's ``file`` part, an
Anthropic ``document`` block (also inside a ``tool_result``, as Claude Code's ``Read`` of a PDF sends it) and a
Responses ``input_file`` part, through the official clients: its pages' text is in the prompt (the same prompt on
every route), a broken file is a 400 in the route's shape, and the server keeps serving."""

from __future__ import annotations

import base64

import anthropic
import httpx
import openai
import pytest

from tests.pdfs import pdf_bytes
from tests.support import Server, openai_client

PDF = base64.b64encode(pdf_bytes(["The secret word is PAPAYA.", "Page two says KIWI."])).decode()
URL = "data:application/pdf;base64," + PDF
ASK = "What is the secret word?"


def chat_messages(name: str = "notes.pdf") -> list[dict]:
    return [{"role": "user", "content": [
        {"type": "file", "file": {"file_data": URL, "filename": name}}, {"type": "text", "text": ASK}]}]


def test_a_pdfs_text_is_in_the_prompt_on_chat_anthropic_and_responses(server: Server) -> None:
    base = server.base_url
    prompt = httpx.post(base + "/apply-template", json={"messages": chat_messages()}, timeout=60).json()["prompt"]
    assert '<document name="notes.pdf">\nThe secret word is PAPAYA.\n\nPage two says KIWI.\n</document>' in prompt
    chat = openai_client(base).chat.completions.create(model="m", messages=chat_messages(), max_tokens=4,
                                                       temperature=0)
    n = chat.usage.prompt_tokens
    assert n > 30

    client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=120)
    doc = {"type": "document", "title": "notes.pdf",
           "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}
    reply = client.messages.create(model="m", max_tokens=4, extra_body={"temperature": 0}, messages=[
        {"role": "user", "content": [doc, {"type": "text", "text": ASK}]}])
    assert reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0) == n
    assert "".join(b.text for b in reply.content if b.type == "text") == (chat.choices[0].message.content or "")
    counted = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": [
        doc, {"type": "text", "text": ASK}]}]).input_tokens
    assert counted == n

    response = openai_client(base).responses.create(model="m", max_output_tokens=4, temperature=0, input=[
        {"role": "user", "content": [{"type": "input_file", "filename": "notes.pdf", "file_data": URL},
                                     {"type": "input_text", "text": ASK}]}])
    assert response.usage.input_tokens == n


def test_claude_codes_read_of_a_pdf_comes_back_as_a_tool_result_document(server: Server) -> None:
    client = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
    tools = [{"name": "Read", "description": "Read a file", "input_schema": {
        "type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}]
    reply = client.messages.create(model="m", max_tokens=4, tools=tools, messages=[
        {"role": "user", "content": "Read notes.pdf"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                           "input": {"file_path": "notes.pdf"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}]}]}])
    assert reply.stop_reason in ("end_turn", "max_tokens", "tool_use")
    without = client.messages.count_tokens(model="m", tools=tools, messages=[
        {"role": "user", "content": "Read notes.pdf"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                           "input": {"file_path": "notes.pdf"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]).input_tokens
    assert reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0) > without + 10  # the pages' text


BROKEN = base64.b64encode(b"%PDF-1.4 not really a pdf").decode()


@pytest.mark.parametrize("route", ["chat", "anthropic", "responses"])
def test_a_broken_pdf_is_a_400_in_the_routes_shape_and_the_server_keeps_serving(server: Server, route: str) -> None:
    base = server.base_url
    if route == "chat":
        with pytest.raises(openai.BadRequestError) as err:
            openai_client(base).chat.completions.create(model="m", max_tokens=2, messages=[{"role": "user", "content": [
                {"type": "file", "file": {"file_data": "data:application/pdf;base64," + BROKEN,
                                          "filename": "x.pdf"}}]}])
        assert err.value.body["code"] == "invalid_file" and err.value.body["param"] == "messages[0].content[0]"
    elif route == "anthropic":
        r = httpx.post(base + "/v1/messages", timeout=60, json={"model": "m", "max_tokens": 2, "messages": [
            {"role": "user", "content": [{"type": "document", "source": {
                "type": "base64", "media_type": "application/pdf", "data": BROKEN}}]}]})
        assert r.status_code == 400 and r.json()["type"] == "error"
        assert "could not be read" in r.json()["error"]["message"]
    else:
        with pytest.raises(openai.BadRequestError) as err:
            openai_client(base).responses.create(model="m", max_output_tokens=2, input=[{"role": "user", "content": [
                {"type": "input_file", "filename": "x.pdf", "file_data": "data:application/pdf;base64," + BROKEN}]}])
        assert "could not be read" in err.value.body["message"]
    ok = openai_client(base).chat.completions.create(model="m", max_tokens=1, messages=[
        {"role": "user", "content": "hi"}])
    assert ok.choices[0].finish_reason in ("length", "stop")
