"""``model: "auto"``: the routing rules (skippy/engine/routing.py), sans-IO."""

from __future__ import annotations

from skippy.engine.protocols.openai.types import ChatCompletionRequest, ContentPart, Message
from skippy.engine.routing import (
    Candidate,
    ModelCapabilities,
    RequestTraits,
    Route,
    chat_traits,
    choose_model,
    is_auto,
)

PLAIN = RequestTraits()
TOOLS = RequestTraits(has_tools=True)
IMAGES = RequestTraits(has_images=True)
TOOLS_CAPS = ModelCapabilities(native_tools=True)
EMULATED = ModelCapabilities()
VISION = ModelCapabilities(image_input=True)


def test_auto_is_the_name_in_any_case() -> None:
    assert is_auto("auto") and is_auto("AUTO") and is_auto("Auto")
    assert not is_auto(None) and not is_auto("") and not is_auto("autos") and not is_auto("smollm2")


def test_a_plain_request_goes_to_the_default_model() -> None:
    models = [Candidate("a", loaded=True, caps=EMULATED), Candidate("b", loaded=True, caps=TOOLS_CAPS)]
    assert choose_model(PLAIN, models, "a") == Route("a", "default")


def test_tools_go_to_a_model_with_native_tool_calls() -> None:
    models = [Candidate("a", loaded=True, caps=EMULATED), Candidate("b", loaded=True, caps=TOOLS_CAPS)]
    assert choose_model(TOOLS, models, "a") == Route("b", "tools")


def test_tools_without_a_native_model_fall_back_to_the_default() -> None:
    models = [Candidate("a", loaded=True, caps=EMULATED), Candidate("b", loaded=True, caps=EMULATED)]
    assert choose_model(TOOLS, models, "a") == Route("a", "default")


def test_the_default_model_wins_when_it_has_native_tools_too() -> None:
    models = [Candidate("a", loaded=True, caps=TOOLS_CAPS), Candidate("b", loaded=True, caps=TOOLS_CAPS)]
    assert choose_model(TOOLS, models, "a") == Route("a", "tools")


def test_loaded_models_are_preferred_then_the_configured_order() -> None:
    models = [Candidate("a", loaded=True, caps=EMULATED), Candidate("b", loaded=False, caps=TOOLS_CAPS),
              Candidate("c", loaded=True, caps=TOOLS_CAPS)]
    assert choose_model(TOOLS, models, "a") == Route("c", "tools")
    # no loaded model fits: one known to fit loads on demand
    models[2] = Candidate("c", loaded=False, caps=EMULATED)
    assert choose_model(TOOLS, models, "a") == Route("b", "tools")


def test_a_model_whose_capabilities_are_unknown_is_not_chosen() -> None:
    models = [Candidate("a", loaded=True, caps=EMULATED), Candidate("b", loaded=False, caps=None)]
    assert choose_model(TOOLS, models, "a") == Route("a", "default")
    assert choose_model(IMAGES, models, "a") == Route("a", "default")


def test_images_go_to_a_model_with_image_input_else_fall_through() -> None:
    vision = [Candidate("a", loaded=True, caps=EMULATED), Candidate("v", loaded=True, caps=VISION)]
    assert choose_model(IMAGES, vision, "a") == Route("v", "images")
    # today no model has image input: an image request falls through to the tools rule, then the default
    today = [Candidate("a", loaded=True, caps=EMULATED), Candidate("t", loaded=True, caps=TOOLS_CAPS)]
    assert choose_model(IMAGES, today, "a") == Route("a", "default")
    both = RequestTraits(has_images=True, has_tools=True)
    assert choose_model(both, today, "a") == Route("t", "tools")
    assert choose_model(both, vision + today[1:], "a") == Route("v", "images")  # images first


def test_the_default_answers_when_no_model_is_left() -> None:
    # every model's load failed (the pool leaves them out): the request goes to the default and gets its 503
    assert choose_model(PLAIN, [], "a") == Route("a", "default")
    assert choose_model(TOOLS, [], "a") == Route("a", "default")


def test_a_failed_default_model_gives_way_to_a_healthy_one() -> None:
    # the default model's load failed (the pool leaves it out): the first candidate stands in, loaded first
    healthy = [Candidate("b", caps=EMULATED), Candidate("c", loaded=True, caps=EMULATED)]
    assert choose_model(PLAIN, healthy, "a") == Route("c", "default")
    assert choose_model(TOOLS, healthy, "a") == Route("c", "default")
    assert choose_model(IMAGES, healthy[:1], "a") == Route("b", "default")


def test_chat_traits_from_a_request() -> None:
    text = ChatCompletionRequest(model="auto", messages=[Message("user", "hi")])
    assert chat_traits(text.messages, text.tools) == PLAIN
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with_tools = ChatCompletionRequest(model="auto", messages=[Message("user", "hi")], tools=[tool])
    assert chat_traits(with_tools.messages, with_tools.tools) == TOOLS
    assert chat_traits(text.messages, []) == PLAIN  # an empty tools list offers none
    image = ContentPart("image_url", image_url={"url": "data:image/png;base64,AAAA"})
    parts = [Message("system", "be brief"), Message("user", [ContentPart("text", text="what is it?"), image])]
    assert chat_traits(parts, None) == IMAGES
    only_text = [Message("user", [ContentPart("text", text="a"), ContentPart("text", text="b")])]
    assert chat_traits(only_text, None) == PLAIN


def test_chat_traits_from_message_dicts() -> None:
    for kind in ("image_url", "input_image", "image"):
        assert chat_traits([{"role": "user", "content": [{"type": kind}]}], None).has_images
    assert chat_traits([{"role": "user", "content": "look at image_url"}], None) == PLAIN
    assert chat_traits([{"role": "assistant", "content": None}], [{"type": "function"}]) == TOOLS


def test_images_go_to_a_model_with_a_projector_even_before_it_loaded() -> None:
    from skippy.engine.routing import Candidate, RequestTraits, choose_model

    candidates = [Candidate("text", loaded=True), Candidate("eye", vision=True)]
    route = choose_model(RequestTraits(has_images=True), candidates, "text")
    assert (route.model, route.rule) == ("eye", "images")
    assert choose_model(RequestTraits(has_images=True), candidates[:1], "text").rule == "default"
