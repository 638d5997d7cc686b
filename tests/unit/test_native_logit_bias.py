"""llama-server's ``logit_bias`` forms on the native /completion (sans-IO), and the OpenAI routes' own rule."""

from __future__ import annotations

import math

import msgspec
import pytest

from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.base import decode_request
from skippy.engine.protocols.llama_server.translate import generation_settings
from skippy.engine.protocols.llama_server.types import NativeCompletionRequest
from skippy.engine.protocols.openai.types import ChatCompletionRequest, CompletionRequest
from skippy.engine.sampling.native import native_logit_bias, resolve_logit_bias
from skippy.engine.sampling.params import SamplingParams, sampling_from_request

INF = math.inf
TOKENS = {"Hello": [9906], " world": [1917], "aa": [64, 64]}  # a text's tokenization (a fake vocabulary)


def parse(body: str) -> tuple[tuple[int, float], ...]:
    req = decode_request(body.encode(), NativeCompletionRequest)
    return resolve_logit_bias(native_logit_bias(req.logit_bias), TOKENS, n_vocab=50_000)


@pytest.mark.parametrize(("logit_bias", "expected"), [
    ('[[15043, 1.0]]', ((15043, 1.0),)),
    ('[[15043, -1]]', ((15043, -1.0),)),
    ('[[15043, false]]', ((15043, -INF),)),  # false: never sampled
    ('[["Hello", -0.5]]', ((9906, -0.5),)),  # a text: every token of its tokenization
    ('[["Hello", false], [" world", 2]]', ((9906, -INF), (1917, 2.0))),
    ('{"15043": 1.5}', ((15043, 1.5),)),  # OpenAI's form
    ('{"15043": false}', ((15043, -INF),)),
    ('{"Hello": 3, "7": -2}', ((9906, 3.0), (7, -2.0))),
    ('{"aa": 1}', ((64, 2.0),)),  # a token named twice gets both biases, as llama.cpp's sampler adds them
    ('[[64, 1], ["aa", false]]', ((64, -INF),)),
    ('[[5, 250]]', ((5, 250.0),)),  # llama-server puts no [-100, 100] range on its own route
    ('[]', ()),
    ('{}', ()),
])
def test_llama_server_forms(logit_bias: str, expected: tuple) -> None:
    assert parse(f'{{"prompt": "x", "logit_bias": {logit_bias}}}') == expected


def test_no_logit_bias() -> None:
    assert parse('{"prompt": "x"}') == ()


@pytest.mark.parametrize("logit_bias", [
    '[[15043, true]]',  # true is no bias (llama-server skips it)
    '[[15043]]', '[[15043, 1, 2]]', '[15043, 1]', '[[1.5, 1]]', '[[null, 1]]', '[["", 1]]', '[[[1], 1]]',
    '[[15043, "1"]]', '[[15043, null]]',
    '{"15043": true}', '{"15043": "1"}', '{"": 1}', '{"1": 1e400}', '[[1, 1e39]]',
    '[[50000, 1]]', '[[-1, 1]]', '{"50000": 1}', '{"-3": 1}',  # outside the vocabulary
    '"15043"', '15043',
])
def test_a_bad_form_is_a_400_naming_logit_bias(logit_bias: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        parse(f'{{"prompt": "x", "logit_bias": {logit_bias}}}')
    assert exc.value.param == "logit_bias", exc.value


@pytest.mark.parametrize("request_type", [ChatCompletionRequest, CompletionRequest])
def test_openai_routes_take_id_maps_and_llama_servers_id_forms(request_type: type) -> None:
    """OpenAI chat and completions take ``{"id": bias}`` with biases in [-100, 100], and llama-server's
    ``false`` (never sampled) and ``[[id, bias]]`` pairs, which its OpenAI routes take too; token ids only."""
    base = '"messages": [{"role": "user", "content": "x"}]' if request_type is ChatCompletionRequest else \
        '"prompt": "x"'
    ok = decode_request(f'{{{base}, "logit_bias": {{"15": -100, "16": 5}}}}'.encode(), request_type)
    assert sampling_from_request(ok, n_vocab=100).logit_bias == ((15, -100.0), (16, 5.0))
    for form in ('{"15": false, "16": 5}', '[[15, false], [16, 5]]'):
        ok = decode_request(f'{{{base}, "logit_bias": {form}}}'.encode(), request_type)
        assert sampling_from_request(ok, n_vocab=100).logit_bias == ((15, -INF), (16, 5.0))
    for bad in ('[[15]]', '{"15": true}', '[[15, true]]', '{"Hello": 1}', '{"15": 101}', '[[1.5, 1]]'):
        with pytest.raises(InvalidRequest) as exc:
            sampling_from_request(decode_request(f'{{{base}, "logit_bias": {bad}}}'.encode(), request_type),
                                  n_vocab=100)
        assert exc.value.param == "logit_bias"


def test_a_ban_is_null_in_generation_settings() -> None:
    """-inf has no JSON number: llama-server writes it as null, and so does generation_settings."""
    settings = generation_settings(SamplingParams(logit_bias=((5, -INF), (6, 1.5))), n_predict=4)
    assert msgspec.json.decode(msgspec.json.encode(settings))["logit_bias"] == [[5.0, None], [6.0, 1.5]]
