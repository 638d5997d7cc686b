"""engine/chat/images.py's naming of an image part (sans-IO): which image a chat path error names, and the
error renamed to the name the request it was translated from gives that image."""

from __future__ import annotations

import pytest

from skippy.engine.chat.images import extract_images, part_ordinal, rename_image_error
from skippy.engine.errors import InvalidRequest
from skippy.engine.protocols.openai.types import ContentPart, Message

URL = "data:image/png;base64,iVBORw0KGgo="
IMAGE = {"type": "image_url", "image_url": {"url": URL}}
MESSAGES = [{"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, IMAGE, IMAGE]},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": [IMAGE, {"type": "text", "text": "c"}]}]


@pytest.mark.parametrize(("param", "ordinal"), [
    ("messages[1].content[1]", 0), ("messages[1].content[2]", 1), ("messages[3].content[0]", 2),
    ("messages[1].content[0]", None), ("messages[3]", None), ("messages", None), (None, None),
    ("messages[9].content[0]", None),
])
def test_part_ordinal_counts_image_parts_in_message_order(param: str | None, ordinal: int | None) -> None:
    assert part_ordinal(MESSAGES, param) == ordinal
    structs = [Message(m["role"], m["content"] if isinstance(m["content"], str) else
                       [ContentPart(**p) for p in m["content"]]) for m in MESSAGES]
    assert part_ordinal(structs, param) == ordinal


def test_a_refusal_is_renamed_to_the_translated_requests_name() -> None:
    paths = ["input[0].content[1]", "input[0].content[2]", "input[2].content[0]"]
    with pytest.raises(InvalidRequest) as info:
        extract_images(MESSAGES, vision=False)
    err = rename_image_error(info.value, MESSAGES, paths)
    assert err is info.value and err.param == "input[0].content[1]" and err.code == "media_not_supported"
    assert err.message.startswith("input[0].content[1]: this model reads text only") and str(err) == err.message
    bad = [*MESSAGES[:3], {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x,y"}}]}]
    with pytest.raises(InvalidRequest) as info:
        extract_images(bad, vision=True)
    assert rename_image_error(info.value, bad, paths).param == "input[2].content[0]"
    other = InvalidRequest("messages: bad", param="messages")  # an error that names no image part: as it is
    assert rename_image_error(other, MESSAGES, paths).message == "messages: bad"
    assert rename_image_error(InvalidRequest("x", param="messages[1].content[1]"), MESSAGES, []).param == \
        "messages[1].content[1]"  # no name for it: as it is


def test_an_image_declaring_too_many_pixels_is_refused_before_decoding() -> None:
    import struct
    import zlib

    from skippy.engine.chat.images import MAX_IMAGE_PIXELS, decode_data_url
    from tests.images import data_url, png_bytes

    small = png_bytes(4, 3, 1)
    assert decode_data_url(data_url(small), "messages[0].content[0]") == small
    # the same file with its IHDR saying 10000 x 10000 (the pixel data need not be there: only the header is read)
    header = struct.pack(">IIBBBBB", 10_000, 10_000, 8, 2, 0, 0, 0)
    ihdr = struct.pack(">I", len(header)) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
    bomb = small[:8] + ihdr + small[8 + len(ihdr):]
    assert 10_000 * 10_000 > MAX_IMAGE_PIXELS
    with pytest.raises(InvalidRequest, match="100000000 pixels") as exc:
        decode_data_url(data_url(bomb), "messages[0].content[0]")
    assert exc.value.code == "image_too_large" and exc.value.param == "messages[0].content[0]"
    # past Pillow's own bomb limit (178M pixels) the declared count is still the one said
    for side in (20_000, 100_000):
        header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
        ihdr = struct.pack(">I", len(header)) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
        with pytest.raises(InvalidRequest, match=f"has {side * side} pixels") as exc:
            decode_data_url(data_url(small[:8] + ihdr + small[8 + len(ihdr):]), "p")
        assert exc.value.code == "image_too_large"
    assert decode_data_url(data_url(b"not an image at all"), "p") == b"not an image at all"  # libmtmd's call


def test_each_image_is_named_by_its_part_and_a_marker_in_the_text_is_refused_naming_it() -> None:
    from tests.images import data_url, png_bytes

    url = {"type": "image_url", "image_url": {"url": data_url(png_bytes(4, 3, 1))}}
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Two:"}, url, url]}]
    _, images, wheres = extract_images(msgs, vision=True)
    assert len(images) == 2 and wheres == ["messages[1].content[1]", "messages[1].content[2]"]
    for bad, where in (([{"role": "user", "content": [url, {"type": "text", "text": "a <__media__> here"}]}],
                        "messages[0].content[1]"),
                       ([{"role": "system", "content": "<__media__>"}, {"role": "user", "content": [url]}],
                        "messages[0].content")):
        with pytest.raises(InvalidRequest) as info:
            extract_images(bad, vision=True)
        assert info.value.param == where and "<__media__>" in info.value.message
