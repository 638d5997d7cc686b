"""/v1/embeddings in and out without a model: input shapes, the context limit, normalization, base64."""

from __future__ import annotations

import base64

import msgspec
import numpy as np
import pytest

from skippy.engine.errors import InvalidRequest
from skippy.engine.output.embeddings import MAX_INPUTS, fit, normalize, split_input
from skippy.engine.protocols.base import decode_request
from skippy.engine.protocols.openai.translate import embedding_list
from skippy.engine.protocols.openai.types import EmbeddingRequest


@pytest.mark.parametrize(("raw", "items"), [
    ("a b", ["a b"]),
    (["a", "b"], ["a", "b"]),
    ([1, 2, 3], [[1, 2, 3]]),
    ([[1, 2], [3]], [[1, 2], [3]]),
])
def test_the_four_openai_input_shapes(raw, items) -> None:
    assert split_input(raw, n_vocab=10) == items


@pytest.mark.parametrize(("raw", "message"), [
    ("", "input 0 is empty"),
    ([], "not empty and not mixed"),
    (["a", ""], "input 1 is empty"),
    ([[1], []], "input 1 is empty"),
    (["a", 1], "not mixed"),
    (["a", [1]], "not mixed"),
    ([1, [2]], "not mixed"),
    ([10], "outside the vocabulary (0..9)"),
    ([[1], [-1]], "input 1 has a token id outside"),
    (["x"] * (MAX_INPUTS + 1), f"at most {MAX_INPUTS}"),
])
def test_bad_inputs_are_400_naming_input(raw, message) -> None:
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(").replace(")", r"\)")) as exc:
        split_input(raw, n_vocab=10)
    assert exc.value.param == "input" and exc.value.status == 400


def test_an_input_longer_than_the_context_is_400_unless_truncated() -> None:
    assert fit([1, 2, 3], 0, 3, truncate=False) == (1, 2, 3)
    with pytest.raises(InvalidRequest, match="input 2 is 4 tokens, longer than the embedding context of 3") as exc:
        fit([1, 2, 3, 4], 2, 3, truncate=False)
    assert exc.value.code == "context_length_exceeded" and exc.value.param == "input"
    assert fit([1, 2, 3, 4], 2, 3, truncate=True) == (1, 2, 3)  # the first tokens are kept
    with pytest.raises(InvalidRequest, match="no tokens"):  # a string that tokenizes to nothing
        fit([], 0, 3, truncate=True)


def test_the_request_struct_refuses_unknown_encodings_and_wrong_types() -> None:
    req = decode_request(b'{"input": ["a"], "dimensions": 3, "truncate": true}', EmbeddingRequest)
    assert (req.encoding_format, req.dimensions, req.truncate) == ("float", 3, True)
    for body, param in ((b'{"input": "a", "encoding_format": "int8"}', "encoding_format"),
                        (b'{"input": 5}', "input"), (b'{"input": [["a"]]}', "input"), (b"{}", "input"),
                        (b'{"input": "a", "dimensions": "3"}', "dimensions")):
        with pytest.raises(InvalidRequest) as exc:
            decode_request(body, EmbeddingRequest)
        assert exc.value.param == param, body


def test_vectors_are_l2_normalized_and_a_zero_vector_stays_zero() -> None:
    v = normalize(np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32))
    assert v.dtype == np.float32 and v.tolist() == [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]


def test_base64_is_the_little_endian_float32_bytes_of_the_float_reply() -> None:
    vectors = np.array([[1.0, -2.0, 2.0], [0.5, 0.25, 0.0]], dtype=np.float32)
    floats = embedding_list(vectors, model="m", prompt_tokens=7, encoding_format="float", rid="embd-1", created=5)
    b64 = embedding_list(vectors, model="m", prompt_tokens=7, encoding_format="base64", rid="embd-1", created=5)
    for f, b in zip(floats.data, b64.data, strict=True):
        assert np.frombuffer(base64.b64decode(b.embedding), dtype="<f4").tolist() == f.embedding
    assert floats.data[0].embedding == pytest.approx([1 / 3, -2 / 3, 2 / 3])
    reply = msgspec.json.decode(msgspec.json.encode(floats))
    assert reply["object"] == "list" and reply["model"] == "m"
    assert (reply["id"], reply["created"]) == ("embd-1", 5)  # vLLM's fields; Mistral's SDK requires the id
    assert reply["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    assert [(d["object"], d["index"]) for d in reply["data"]] == [("embedding", 0), ("embedding", 1)]
