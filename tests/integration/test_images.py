"""Image input on the real server (issue 38, first part): ``skippy serve --mmproj`` with SmolLM2-135M and the
tiny random-weight projector of :func:`tests.tiny_models.write_tiny_mmproj` (no vision model can be
pulled here). With random weights the words mean nothing, so the oracle is llama.cpp's libmtmd driven
directly (:mod:`tests.mtmd_oracle`): the first token's logprobs for the text and the image equal the
oracle's; another image changes them; the same image again reuses its KV; bad images are 400s and the
server keeps serving. The Ollama, Responses and Anthropic routes, through their official clients, give
the reply the same image gives through chat completions.
"""

from __future__ import annotations

import base64
import os
import shutil

import anthropic
import httpx
import numpy as np
import openai
import pytest

from skippy.models import DEFAULT_MODEL, ensure_model
from tests.images import data_url, png_bytes, solid
from tests.images import image_messages as messages
from tests.mtmd_oracle import first_logits
from tests.support import Server, first_top, openai_client
from tests.tiny_models import MMPROJ_IMAGE_TOKENS

RED, BLUE = png_bytes(40, 30, solid((255, 0, 0))), png_bytes(24, 24, solid((0, 0, 255)))


@pytest.fixture(scope="module")
def vision_server(mmproj, tmp_path_factory: pytest.TempPathFactory):
    with Server(["--mmproj", str(mmproj), "--parallel", "2", "--n-ctx", "1024"],
                tmp_path_factory.mktemp("vision") / "server.log") as srv:
        yield srv


def test_props_and_models_report_vision(vision_server: Server) -> None:
    modalities = httpx.get(vision_server.base_url + "/props").json()["modalities"]
    assert modalities == {"vision": True, "audio": False, "video": False}
    [model] = httpx.get(vision_server.base_url + "/v1/models").json()["data"]
    assert model["architecture"] == {"input_modalities": ["text", "image"], "output_modalities": ["text"]}


def test_the_first_token_equals_libmtmd_driven_directly_and_the_image_matters(vision_server: Server,
                                                                            mmproj) -> None:
    msgs = messages(RED)
    prompt = httpx.post(vision_server.base_url + "/apply-template", json={"messages": msgs}).json()["prompt"]
    assert prompt.count("<__media__>") == 1
    logits = first_logits(ensure_model(DEFAULT_MODEL), mmproj, prompt, [RED])
    logprobs = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
    top, usage = first_top(vision_server.base_url, msgs, cache_prompt=False)
    ids = np.argsort(-logprobs)[:5]
    assert [lp for _, lp in top] == pytest.approx([float(logprobs[i]) for i in ids], abs=2e-3)
    assert usage["prompt_tokens"] > MMPROJ_IMAGE_TOKENS
    blue, _ = first_top(vision_server.base_url, messages(BLUE), cache_prompt=False)
    text_only, _ = first_top(vision_server.base_url, [{"role": "user", "content": "Describe the picture."}])
    assert blue != top and text_only != top


def test_the_same_image_again_reuses_its_kv_and_another_image_does_not(vision_server: Server) -> None:
    text = "What colour dominates this picture, in one word?"
    first, _ = first_top(vision_server.base_url, messages(RED, text=text))
    again, usage = first_top(vision_server.base_url, messages(RED, text=text))
    assert again == first
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached >= usage["prompt_tokens"] - 2  # the whole prompt but its last token(s): the image included
    _, other = first_top(vision_server.base_url, messages(BLUE, text=text))
    assert other["prompt_tokens_details"]["cached_tokens"] < other["prompt_tokens"] - MMPROJ_IMAGE_TOKENS


def test_streamed_equals_not_streamed_through_the_openai_client(vision_server: Server) -> None:
    client = openai_client(vision_server.base_url)
    kwargs = dict(model="m", messages=messages(RED, BLUE, text="Compare the two pictures."), temperature=0,
                  max_tokens=12)
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kwargs)
                       if c.choices)
    assert whole and streamed == whole


def test_formats_libmtmd_does_not_read_are_decoded_by_pillow(vision_server: Server) -> None:
    """WebP (OpenAI and Anthropic list it) and TIFF: Pillow decodes them, libmtmd gets the pixels; a lossless
    WebP of the PNG's pixels gives the PNG's first token exactly."""
    import io

    from PIL import Image

    def encoded(fmt: str, **options) -> bytes:
        out = io.BytesIO()
        Image.open(io.BytesIO(RED)).save(out, fmt, **options)
        return out.getvalue()

    png, _ = first_top(vision_server.base_url, messages(RED), cache_prompt=False)
    for data in (encoded("WEBP", lossless=True), encoded("TIFF")):
        top, _ = first_top(vision_server.base_url, messages(data), cache_prompt=False)
        assert top == png
    r = httpx.post(vision_server.base_url + "/v1/messages", timeout=60, json={
        "model": "m", "max_tokens": 1, "messages": anthropic_messages(encoded("WEBP"), media_type="image/webp")})
    assert r.status_code == 200, r.text


def test_input_tokens_counts_an_images_positions(vision_server: Server) -> None:
    r = httpx.post(vision_server.base_url + "/v1/chat/completions/input_tokens", timeout=60,
                   json={"messages": messages(BLUE)})
    assert r.status_code == 200, r.text
    _, usage = first_top(vision_server.base_url, messages(BLUE))
    assert r.json()["input_tokens"] == usage["prompt_tokens"] > MMPROJ_IMAGE_TOKENS


@pytest.mark.parametrize(("url", "code", "fragment"), [
    ("data:image/png;base64,@@@not-base64@@@", None, "not valid base64"),
    (data_url(b"this is not an image"), "invalid_image", "could not be read"),
    ("https://example.com/cat.png", "image_url_not_supported", "start it with --allow-image-urls"),
    ("data:image/png,rawbytes", None, "base64 data URL"),
    ("", None, "non-empty string"),
])
def test_bad_images_are_400s_naming_the_part_and_the_server_keeps_serving(vision_server: Server, url: str,
                                                                          code: str | None, fragment: str) -> None:
    r = httpx.post(vision_server.base_url + "/v1/chat/completions", timeout=60,
                   json={"messages": messages(url), "max_tokens": 1})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert fragment in err["message"]
    if code is not None:
        assert err["code"] == code
    assert err["param"] == "messages[0].content[1]"  # libmtmd's refusal (invalid_image) too
    top, _ = first_top(vision_server.base_url, messages(RED))
    assert top


def test_too_many_images_and_a_marker_in_the_text_are_refused(vision_server: Server) -> None:
    r = httpx.post(vision_server.base_url + "/v1/chat/completions", timeout=60,
                   json={"messages": messages(*[RED] * 17), "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_images"
    r = httpx.post(vision_server.base_url + "/v1/chat/completions", timeout=60,
                   json={"messages": messages(RED, text="a <__media__> in my text"), "max_tokens": 1})
    assert r.status_code == 400 and "<__media__>" in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "messages[0].content[0]"


def test_a_server_without_mmproj_refuses_images_naming_the_flag(tmp_path) -> None:
    with Server(["--parallel", "1", "--n-ctx", "512"], tmp_path / "server.log") as srv:
        assert httpx.get(srv.base_url + "/props").json()["modalities"]["vision"] is False
        r = httpx.post(srv.base_url + "/v1/chat/completions", timeout=60,
                       json={"messages": messages(RED), "max_tokens": 1})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == "media_not_supported" and "--mmproj" in err["message"]
        assert err["param"] == "messages[0].content[1]"
        r = httpx.post(srv.base_url + "/completion", timeout=60, json={"prompt": {
            "prompt_string": "<__media__> What is it?", "multimodal_data": [base64.b64encode(RED).decode()]}})
        assert r.status_code == 400 and "--mmproj" in r.json()["error"]["message"]
        # the Responses and Anthropic routes: the same refusal, named as their requests name the image
        for stream in (False, True):
            r = httpx.post(srv.base_url + "/v1/responses", timeout=60, json={
                "input": responses_input(RED), "max_output_tokens": 1, "stream": stream})
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["code"] == "media_not_supported" and err["type"] == "invalid_request_error"
            assert err["param"] == "input[0].content[1]" and "--mmproj" in err["message"]
            r = httpx.post(srv.base_url + "/v1/messages", timeout=60, json={
                "model": "m", "max_tokens": 1, "messages": anthropic_messages(RED), "stream": stream})
            assert r.status_code == 400, r.text
            assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
            assert r.json()["error"]["message"].startswith("messages.0.content.1: ")
            assert "--mmproj" in r.json()["error"]["message"]


def test_a_projector_that_is_no_gguf_stops_the_start(tmp_path) -> None:
    bad = tmp_path / "bad.mmproj.gguf"
    bad.write_bytes(b"not a projector")
    srv = Server(["--mmproj", str(bad), "--parallel", "1", "--n-ctx", "512"], tmp_path / "server.log")
    try:
        assert srv.proc.wait(timeout=120) != 0
        assert "--mmproj" in srv.log() or "projector" in srv.log()
    finally:
        srv.stop()


def test_ollamas_images_reach_the_model_through_the_official_client(vision_server: Server) -> None:
    import ollama

    client = ollama.Client(host=vision_server.base_url)
    reply = client.chat(model="smollm2:135m", messages=[
        {"role": "user", "content": "Describe the picture.", "images": [RED]}], options={"temperature": 0,
                                                                                         "num_predict": 8})
    # Ollama puts a message's images before its text: the same message in OpenAI's shape
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(RED)}},
                                                       {"type": "text", "text": "Describe the picture."}]}],
            "temperature": 0, "max_tokens": 8}
    same = httpx.post(vision_server.base_url + "/v1/chat/completions", json=body, timeout=60).json()
    assert reply.message.content == same["choices"][0]["message"]["content"]
    blue = client.generate(model="smollm2:135m", prompt="Describe the picture.", images=[BLUE],
                           options={"temperature": 0, "num_predict": 8})
    assert blue.response and blue.response != reply.message.content
    show = client.show("smollm2:135m")
    assert "vision" in show.capabilities
    resp = httpx.post(vision_server.base_url + "/api/chat", timeout=60, json={
        "model": "smollm2:135m", "stream": False,
        "messages": [{"role": "user", "content": "x", "images": ["@@not base64@@"]}]})
    assert resp.status_code == 400 and "messages.0.images.0" in resp.json()["error"]
    # errors found after the translation name the image as Ollama's request has it too
    unreadable = base64.b64encode(b"not an image").decode()
    for stream in (False, True):
        resp = httpx.post(vision_server.base_url + "/api/chat", timeout=60, json={
            "model": "smollm2:135m", "stream": stream, "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Two?", "images": [base64.b64encode(RED).decode(), unreadable]}]})
        assert resp.status_code == 400 and resp.json()["error"].startswith("messages.1.images.1: the image could")
    resp = httpx.post(vision_server.base_url + "/api/generate", timeout=60, json={
        "model": "smollm2:135m", "stream": False, "prompt": "x", "images": [base64.b64encode(RED).decode()] * 17})
    assert resp.status_code == 400 and resp.json()["error"].startswith("images.16: more than 16 images")


def test_a_text_model_consults_a_peer_that_reads_images_media_fallback(vision_server: Server, tmp_path) -> None:
    # the text-only server consults the vision server: it describes the image, the description is injected
    with Server(["--parallel", "1", "--n-ctx", "1024", "--consult", vision_server.base_url, "--hooks-default-on",
                 "--consult-timeout", "60"],  # the peer encodes and describes: a busy machine needs time
                tmp_path / "text.log") as text:
        r = httpx.post(text.base_url + "/v1/chat/completions", timeout=60, json={
            "messages": messages(RED), "temperature": 0, "max_tokens": 8, "return_hook_events": True})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["message"]["content"]
        first = choice["hook_events"][0]
        assert (first["event"], first["action"]) == ("before_chat", "inject")
        assert first["consult"]["peer"] == vision_server.base_url
        assert first["consult"]["outcome"] == "described" and first["consult"]["chars"] > 0
        peer_log = vision_server.log()
        assert "POST /v1/chat/completions 200" in peer_log
        assert "media fallback: " + vision_server.base_url in text.log()
        prompt_tokens = r.json()["usage"]["prompt_tokens"]
        plain = httpx.post(text.base_url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "Describe the picture."}], "max_tokens": 1})
        assert prompt_tokens > plain.json()["usage"]["prompt_tokens"]  # the description is in the prompt
        # a request without hooks is not consulted: the text model's 400, naming both ways out
        r = httpx.post(text.base_url + "/v1/chat/completions", timeout=60, json={
            "messages": messages(RED), "max_tokens": 8, "mesh_hooks": False})
        assert r.status_code == 400 and r.json()["error"]["code"] == "media_not_supported"
        assert "--consult" in r.json()["error"]["message"] and "--mmproj" in r.json()["error"]["message"]
    # a peer that reads text only cannot describe: a 400 that names --consult
    with Server(["--parallel", "1", "--n-ctx", "512"], tmp_path / "peer.log") as peer, \
            Server(["--parallel", "1", "--n-ctx", "512", "--consult", peer.base_url, "--hooks-default-on"],
                   tmp_path / "asker.log") as asker:
        r = httpx.post(asker.base_url + "/v1/chat/completions", timeout=60, json={
            "messages": messages(RED), "max_tokens": 8})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "media_not_supported" and "--consult" in r.json()["error"]["message"]


def test_models_dir_projectors_and_auto_routing_of_images(mmproj, tmp_path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    default = ensure_model(DEFAULT_MODEL)
    for name in ("plain.gguf", "smol.gguf", "text.gguf"):  # files (a file named twice is served once): hard links
        try:
            os.link(default, models / name)
        except OSError:
            shutil.copyfile(default, models / name)
    (models / "smol.mmproj.gguf").symlink_to(mmproj)
    with Server(["--models-dir", str(models), "--parallel", "1", "--n-ctx", "1024"], tmp_path / "server.log") as srv:
        listed = {m["id"]: m.get("architecture") for m in httpx.get(srv.base_url + "/v1/models").json()["data"]}
        assert listed["smol"]["input_modalities"] == ["text", "image"]
        assert listed["plain"]["input_modalities"] == ["text"] and "smol.mmproj" not in listed
        r = httpx.post(srv.base_url + "/v1/chat/completions", timeout=120, json={
            "model": "auto", "messages": messages(RED), "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == "smol", r.text  # images: the model that reads them
        r = httpx.post(srv.base_url + "/v1/chat/completions", timeout=120, json={
            "model": "plain", "messages": messages(RED), "max_tokens": 2})
        assert r.status_code == 400 and r.json()["error"]["code"] == "media_not_supported"
        # a text-only model that is not loaded refuses images from its settings: it is not loaded for a 400
        states = {m["id"]: m["state"] for m in httpx.get(srv.base_url + "/v1/models").json()["data"]}
        assert states["text"] == "unloaded", states
        r = httpx.post(srv.base_url + "/v1/chat/completions", timeout=120, json={
            "model": "text", "messages": messages(RED), "max_tokens": 2})
        assert r.status_code == 400 and r.json()["error"]["code"] == "media_not_supported", r.text
        assert r.json()["error"]["param"] == "messages[0].content[1]"
        r = httpx.post(srv.base_url + "/api/chat", timeout=120, json={
            "model": "text", "stream": False,
            "messages": [{"role": "user", "content": "colour?", "images": [base64.b64encode(RED).decode()]}]})
        assert r.status_code == 400 and r.json()["error"].startswith("messages.0.images.0: "), r.text
        states = {m["id"]: m["state"] for m in httpx.get(srv.base_url + "/v1/models").json()["data"]}
        assert states["text"] == "unloaded", states


def test_llama_server_completion_takes_multimodal_data(vision_server: Server, mmproj) -> None:
    msgs = messages(RED)
    prompt = httpx.post(vision_server.base_url + "/apply-template", json={"messages": msgs}).json()["prompt"]
    body = {"prompt": {"prompt_string": prompt, "multimodal_data": [base64.b64encode(RED).decode()]},
            "n_predict": 6, "temperature": 0, "cache_prompt": False}
    native = httpx.post(vision_server.base_url + "/completion", json=body, timeout=60).json()
    chat = httpx.post(vision_server.base_url + "/v1/chat/completions", timeout=60, json={
        "messages": msgs, "temperature": 0, "max_tokens": 6}).json()
    assert native["content"] == chat["choices"][0]["message"]["content"]
    assert native["prompt"] == prompt and native["tokens_evaluated"] == chat["usage"]["prompt_tokens"]
    # several prompts: an object with media beside a plain string
    both = httpx.post(vision_server.base_url + "/completion", timeout=60, json={
        **body, "prompt": [body["prompt"], "The sky is"]}).json()
    assert [r["index"] for r in both] == [0, 1] and both[0]["content"] == native["content"]
    bad = httpx.post(vision_server.base_url + "/completion", timeout=60, json={
        **body, "prompt": {"prompt_string": prompt, "multimodal_data": ["@@"]}})
    assert bad.status_code == 400 and "multimodal_data[0]" in bad.json()["error"]["message"]
    unreadable = httpx.post(vision_server.base_url + "/completion", timeout=60, json={
        **body, "prompt": {"prompt_string": prompt, "multimodal_data": [base64.b64encode(b"no image").decode()]}})
    assert unreadable.status_code == 400 and unreadable.json()["error"]["code"] == "invalid_image"
    assert unreadable.json()["error"]["message"].startswith("prompt.multimodal_data[0]: the image could not be read")
    two = httpx.post(vision_server.base_url + "/completion", timeout=60, json={
        **body, "prompt": {"prompt_string": prompt, "multimodal_data": [body["prompt"]["multimodal_data"][0]] * 2}})
    assert two.status_code == 400 and "media markers" in two.json()["error"]["message"]


# -- the Responses and Anthropic routes: their image parts become image_url parts -------------------------

TEXT = "Describe the picture."


def responses_input(image: bytes | str, text: str = TEXT) -> list[dict]:
    url = image if isinstance(image, str) else data_url(image)
    return [{"role": "user", "content": [{"type": "input_text", "text": text},
                                         {"type": "input_image", "image_url": url, "detail": "auto"}]}]


def anthropic_messages(image: bytes | str, text: str = TEXT, media_type: str = "image/png") -> list[dict]:
    data = image if isinstance(image, str) else base64.b64encode(image).decode()
    return [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image", "source": {
        "type": "base64", "media_type": media_type, "data": data}}]}]


def chat_reply(base_url: str, image: bytes, text: str = TEXT, max_tokens: int = 6) -> dict:
    r = httpx.post(base_url + "/v1/chat/completions", timeout=60, json={
        "messages": messages(image, text=text), "temperature": 0, "max_tokens": max_tokens})
    assert r.status_code == 200, r.text
    return r.json()


def test_responses_input_image_reaches_the_model_through_the_official_client(vision_server: Server) -> None:
    text = "What is in this picture? Answer in a few words."
    same = chat_reply(vision_server.base_url, RED, text)
    client = openai_client(vision_server.base_url)
    kwargs = dict(model="m", input=responses_input(RED, text), temperature=0, max_output_tokens=6)
    reply = client.responses.create(**kwargs)
    assert reply.status in ("completed", "incomplete")
    assert reply.output_text == same["choices"][0]["message"]["content"]
    assert reply.usage.input_tokens == same["usage"]["prompt_tokens"] > MMPROJ_IMAGE_TOKENS
    again = client.responses.create(**kwargs)  # the same image: its KV is reused
    assert again.output_text == reply.output_text
    assert again.usage.input_tokens_details.cached_tokens >= again.usage.input_tokens - 2
    with client.responses.stream(**kwargs) as stream:
        streamed = list(stream)[-1].response  # response.incomplete when max_output_tokens ends it
    assert streamed.output_text == reply.output_text
    # a follow-up carries the stored conversation's image again: it is still cached
    follow = client.responses.create(model="m", previous_response_id=reply.id, input="And its colour?",
                                     temperature=0, max_output_tokens=2)
    assert follow.usage.input_tokens_details.cached_tokens > MMPROJ_IMAGE_TOKENS
    with pytest.raises(openai.BadRequestError) as err:  # no Files API: a file_id is refused
        client.responses.create(model="m", input=[{"role": "user", "content": [
            {"type": "input_image", "file_id": "file_1", "detail": "auto"}]}])
    assert err.value.body["param"] == "input[0].content[0].file_id" and "Files API" in err.value.body["message"]


def test_anthropic_image_blocks_reach_the_model_through_the_official_client(vision_server: Server) -> None:
    text = "Which colour is this picture? Answer in a few words."
    same = chat_reply(vision_server.base_url, BLUE, text)
    client = anthropic.Anthropic(base_url=vision_server.base_url, api_key="unused", max_retries=0, timeout=120)
    kwargs = dict(model="m", max_tokens=6, extra_body={"temperature": 0}, messages=anthropic_messages(BLUE, text))
    reply = client.messages.create(**kwargs)
    assert reply.content[0].type == "text" and reply.content[0].text == same["choices"][0]["message"]["content"]
    prompt = reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0)
    assert prompt == same["usage"]["prompt_tokens"] > MMPROJ_IMAGE_TOKENS
    counted = client.messages.count_tokens(model="m", messages=kwargs["messages"]).input_tokens
    assert counted == prompt  # count_tokens counts the image's positions, not its marker's text
    again = client.messages.create(**kwargs)
    assert again.content[0].text == reply.content[0].text
    assert again.usage.cache_read_input_tokens >= prompt - 2  # the image's KV reused
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens == prompt
    with client.messages.stream(**kwargs) as stream:
        assert stream.get_final_message().content[0].text == reply.content[0].text


SHOT = {"type": "function", "function": {"name": "screenshot", "description": "A screenshot of the screen",
                                          "parameters": {"type": "object", "properties": {}}}}


def test_a_tool_results_image_reaches_the_model_on_chat_anthropic_responses_and_ollama(vision_server: Server) -> None:
    """An agent's tool that returns a picture (a screenshot, an image file it read): the image in the tool's
    result is read as a user message's would be, the same prompt on every route as on chat's tool message."""
    base = vision_server.base_url
    data = base64.b64encode(BLUE).decode()
    chat_messages = [{"role": "user", "content": "Take a screenshot."},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": "c1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": [
                         {"type": "text", "text": "The screen:"},
                         {"type": "image_url", "image_url": {"url": data_url(BLUE)}}]}]
    r = httpx.post(base + "/v1/chat/completions", timeout=60, json={
        "messages": chat_messages, "tools": [SHOT], "temperature": 0, "max_tokens": 4})
    assert r.status_code == 200, r.text
    same = r.json()
    text_only = httpx.post(base + "/v1/chat/completions", timeout=60, json={
        "messages": [*chat_messages[:2], {**chat_messages[2], "content": "The screen:"}], "tools": [SHOT],
        "max_tokens": 1}).json()
    assert same["usage"]["prompt_tokens"] >= text_only["usage"]["prompt_tokens"] + MMPROJ_IMAGE_TOKENS

    client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=120)
    reply = client.messages.create(model="m", max_tokens=4, extra_body={"temperature": 0}, tools=[
        {"name": "screenshot", "description": "A screenshot of the screen",
         "input_schema": SHOT["function"]["parameters"]}],
        messages=[{"role": "user", "content": "Take a screenshot."},
                  {"role": "assistant", "content": [
                      {"type": "tool_use", "id": "c1", "name": "screenshot", "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": [
                      {"type": "text", "text": "The screen:"},
                      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}]}])
    assert reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0) == same["usage"]["prompt_tokens"]
    said = "".join(b.text for b in reply.content if b.type == "text")
    assert said == (same["choices"][0]["message"]["content"] or "")

    response = openai_client(base).responses.create(model="m", max_output_tokens=4, temperature=0, tools=[
        {"type": "function", **SHOT["function"]}], input=[
        {"role": "user", "content": "Take a screenshot."},
        {"type": "function_call", "call_id": "c1", "name": "screenshot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "The screen:"}, {"type": "input_image", "image_url": data_url(BLUE)}]}])
    assert response.usage.input_tokens == same["usage"]["prompt_tokens"]

    import ollama

    ollama_reply = ollama.Client(host=base).chat(model="smollm2:135m", tools=[SHOT], options={"num_predict": 1},
                                                 messages=[
        {"role": "user", "content": "Take a screenshot."},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "screenshot", "arguments": {}}}]},
        {"role": "tool", "tool_name": "screenshot", "content": "The screen:", "images": [BLUE]}])
    assert ollama_reply.prompt_eval_count >= text_only["usage"]["prompt_tokens"] + MMPROJ_IMAGE_TOKENS


@pytest.mark.parametrize(("image", "param", "code", "words"), [
    ("data:image/png;base64,@@@not-base64@@@", "input[0].content[1]", None, "not valid base64"),
    ("https://example.com/cat.png", "input[0].content[1]", "image_url_not_supported", "not fetched"),
    (data_url(b"this is not an image"), "input[0].content[1]", "invalid_image", "could not be read"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_bad_responses_images_are_400s_in_openais_shape_and_the_server_keeps_serving(
        vision_server: Server, image: str, param: str, code: str | None, words: str, stream: bool) -> None:
    r = httpx.post(vision_server.base_url + "/v1/responses", timeout=60, json={
        "input": responses_input(image), "max_output_tokens": 1, "stream": stream})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and words in err["message"]
    assert "messages[" not in err["message"]
    if code is not None:
        assert err["code"] == code
    assert openai_client(vision_server.base_url).responses.create(
        model="m", input=responses_input(RED), max_output_tokens=1).usage.input_tokens > MMPROJ_IMAGE_TOKENS


@pytest.mark.parametrize(("block", "words"), [
    ({"type": "base64", "media_type": "image/png", "data": "@@@not-base64@@@"},
     "messages.0.content.1.source.data is not valid base64"),
    ({"type": "url", "url": "https://example.com/cat.png"}, "not fetched"),
    ({"type": "base64", "media_type": "image/png", "data": base64.b64encode(b"this is not an image").decode()},
     "messages.0.content.1: the image could not be read"),
    ({"type": "base64", "media_type": "image/tiff", "data": "AAAA"}, "media_type"),
])
def test_bad_anthropic_images_are_400s_in_anthropics_shape_and_the_server_keeps_serving(
        vision_server: Server, block: dict, words: str) -> None:
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "text", "text": TEXT}, {"type": "image", "source": block}]}]}
    for stream in (False, True):
        r = httpx.post(vision_server.base_url + "/v1/messages", timeout=60, json={**body, "stream": stream})
        assert r.status_code == 400, r.text
        assert set(r.json()) == {"type", "error"} and r.json()["error"]["type"] == "invalid_request_error"
        assert words in r.json()["error"]["message"]
    client = anthropic.Anthropic(base_url=vision_server.base_url, api_key="unused", max_retries=0, timeout=120)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(**body)
    ok = client.messages.create(model="m", max_tokens=1, messages=anthropic_messages(RED))
    assert ok.usage.input_tokens + ok.usage.cache_read_input_tokens > MMPROJ_IMAGE_TOKENS
