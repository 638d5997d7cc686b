"""Document parts (``file``): a PDF's text by pypdf, a text file's as UTF-8, in the message in place of the part
(:mod:`skippy.engine.chat.documents`); and the Anthropic ``document`` blocks and Responses ``input_file`` parts
that become them. The PDFs are made here (:mod:`tests.pdfs`)."""

from __future__ import annotations

import base64

import msgspec
import pytest

from skippy.engine.chat.documents import MAX_PDF_PAGES, extract_documents, file_text
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.anthropic import translate as atr
from skippy.engine.protocols.anthropic.types import MessagesRequest
from skippy.engine.protocols.openai.types import message_dicts
from skippy.engine.protocols.responses import translate as rapi
from skippy.engine.protocols.responses.types import ResponsesRequest
from tests.pdfs import pdf_bytes

PDF = base64.b64encode(pdf_bytes(["The secret word is PAPAYA.", "Page two says KIWI."])).decode()


def part(data: str, media_type: str = "application/pdf", filename: str | None = "notes.pdf") -> dict:
    file = {"file_data": f"data:{media_type};base64,{data}"}
    return {"type": "file", "file": file if filename is None else {**file, "filename": filename}}


def test_a_pdfs_pages_and_a_text_files_text_take_the_parts_place() -> None:
    text = base64.b64encode(b"a,b\n1,2\n").decode()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [
        {"type": "text", "text": "Summarize:"}, part(PDF), part(text, "text/csv", "t.csv")]}]
    out = extract_documents(messages)
    assert out[0] is messages[0] and messages[1]["content"][1]["type"] == "file"  # not mutated
    assert out[1]["content"] == [
        {"type": "text", "text": "Summarize:"},
        {"type": "text", "text": '<document name="notes.pdf">\nThe secret word is PAPAYA.\n\nPage two says KIWI.\n'
                                 "</document>"},
        {"type": "text", "text": '<document name="t.csv">\na,b\n1,2\n\n</document>'}]
    # no media type in the URL: the file name's extension decides; no name: "document"
    assert "PAPAYA" in file_text(part(PDF, "application/octet-stream", "x.PDF"), "w")
    assert file_text(part(text, "text/plain", None), "w").startswith('<document name="document">')
    plain = [{"role": "user", "content": "hi"}]
    assert extract_documents(plain) is plain


def too_many_pages() -> str:
    return base64.b64encode(pdf_bytes(["x"] * (MAX_PDF_PAGES + 1))).decode()


@pytest.mark.parametrize(("bad", "words"), [
    ({"type": "file", "file": {"file_id": "file-1"}}, "no Files API"),
    ({"type": "file", "file": {"file_data": "https://example.com/a.pdf"}}, "not fetched"),
    ({"type": "file", "file": {"file_data": "data:application/pdf;base64,@@@"}}, "not valid base64"),
    ({"type": "file", "file": "x"}, "must be an object"),
    (part("AAAA", "application/msword", "a.doc"), "'application/msword' are not read"),
    (part(base64.b64encode(b"%PDF-1.4 this is no pdf").decode()), "the PDF could not be read"),
    (None, f"at most {MAX_PDF_PAGES} are read"),
    (part(base64.b64encode(pdf_bytes(["old"], flate="/Fl")).decode()), "could not be read"),  # pypdf: DeprecationError
    ("bomb", "could not be read"),  # a stream inflating past pypdf's limit (LimitReachedError): a 400, not a 500
])
def test_unreadable_files_are_400s_naming_the_part(bad: dict | str | None, words: str) -> None:
    if bad == "bomb":
        bad = part(base64.b64encode(pdf_bytes(["boom"], flate="/FlateDecode", padding=80_000_000)).decode())
    bad = bad if bad is not None else part(too_many_pages())
    with pytest.raises(InvalidRequest) as err:
        extract_documents([{"role": "user", "content": [{"type": "text", "text": "x"}, bad]}])
    assert err.value.param.startswith("messages[0].content[1]") and words in err.value.message, err.value.message


def anthropic(content: list) -> list[dict]:
    req = msgspec.convert({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": content}]},
                          MessagesRequest)
    return message_dicts(atr.to_chat_request(req).messages)


def test_anthropic_document_blocks_become_file_and_text_parts() -> None:
    [msg] = anthropic([
        {"type": "document", "title": "Notes", "context": "From the team wiki.",
         "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain words"},
         "citations": {"enabled": True}},
        {"type": "document", "title": "Chunks", "source": {"type": "content", "content": [
            {"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}},
        {"type": "text", "text": "What do they say?"}])
    assert msg["content"] == [
        {"type": "text", "text": "From the team wiki."},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64," + PDF, "filename": "Notes"}},
        {"type": "text", "text": '<document name="document">\nplain words\n</document>'},
        {"type": "text", "text": '<document name="Chunks">\none\ntwo\n</document>'},
        {"type": "text", "text": "What do they say?"}]
    assert "PAPAYA" in extract_documents([msg])[0]["content"][1]["text"]


def test_a_tool_results_pdf_is_read_as_the_tool_messages_part() -> None:
    req = msgspec.convert({"model": "m", "max_tokens": 8, "messages": [
        {"role": "user", "content": "Read notes.pdf"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}]}]}]},
        MessagesRequest)
    tool = message_dicts(atr.to_chat_request(req).messages)[2]
    assert tool["role"] == "tool" and tool["content"][0]["file"]["filename"] == "document.pdf"


def test_responses_input_file_parts_become_file_parts() -> None:
    turn = rapi.prepare(msgspec.convert({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "Summarize"},
        {"type": "input_file", "filename": "notes.pdf", "file_data": "data:application/pdf;base64," + PDF}]}]},
        ResponsesRequest), None, model="m")
    assert message_dicts(turn.chat.messages)[0]["content"][1] == {"type": "file", "file": {
        "file_data": "data:application/pdf;base64," + PDF, "filename": "notes.pdf"}}
    for field, value in (("file_id", "file-1"), ("file_url", "https://example.com/a.pdf")):
        with pytest.raises(InvalidRequest) as err:
            rapi.prepare(msgspec.convert({"input": [{"role": "user", "content": [
                {"type": "input_file", field: value}]}]}, ResponsesRequest), None, model="m")
        assert err.value.param == f"input[0].content[0].{field}"


BROKEN = base64.b64encode(b"%PDF-1.4\nnot a pdf at all").decode()


def first_error(chat_messages: list) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as err:
        extract_documents(message_dicts(chat_messages))
    return err.value


def test_a_documents_error_is_named_by_the_routes_own_path() -> None:
    doc = {"type": "document", "context": "ctx", "source": {"type": "base64", "media_type": "application/pdf",
                                                             "data": BROKEN}}
    for messages, name in [
        ([{"role": "user", "content": [{"type": "text", "text": "a"}, doc]}], "messages.0.content.1"),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
          {"role": "user", "content": [doc]}], "messages.2.content.0"),
        ([{"role": "user", "content": "read"},
          {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
              {"type": "text", "text": "t"}, doc]}]}], "messages.2.content.0.content.1"),
    ]:
        req = msgspec.convert({"model": "m", "max_tokens": 8, "system": "s", "messages": messages}, MessagesRequest)
        chat = atr.to_chat_request(req)
        err = atr.restate_error(first_error(chat.messages), req, chat)
        assert err.param == name and err.message.startswith(name + ": the PDF could not be read"), err.message
    turn = rapi.prepare(msgspec.convert({"instructions": "be nice", "input": [
        {"role": "user", "content": "first"}, {"role": "user", "content": [
            {"type": "input_text", "text": "hi"}, {"type": "input_file", "file_data": BROKEN, "filename": "g.pdf"}]}]},
        ResponsesRequest), None, model="m")  # bare base64: the file name tells the type
    err = turn.rename(first_error(turn.chat.messages))
    assert err.param == "input[1].content[1]" and err.message.startswith("input[1].content[1]: the PDF")


def test_a_pdf_without_text_says_so_and_the_media_marker_is_kept_out() -> None:
    blank = base64.b64encode(pdf_bytes([""])).decode()
    assert "no text to read" in file_text(part(blank), "w")
    marked = base64.b64encode(b"see <__media__> here").decode()
    assert file_text(part(marked, "text/plain", "m.txt"), "w") == '<document name="m.txt">\nsee  here\n</document>'
