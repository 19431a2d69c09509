"""Image sniffing and fitting (pi-tools 2.1 step 4-5, image-process tests of 7.2)."""

from __future__ import annotations

import base64
import io
import struct

import pytest
from PIL import Image

from agent_side.tools._image import (
    CONVERSION_FAILED,
    detect_image_mime_type,
    process_image,
)


def _encode(size: tuple[int, int], fmt: str, mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, (200, 30, 30)).save(buffer, fmt)
    return buffer.getvalue()


def _noise(size: tuple[int, int]) -> bytes:
    import random

    rng = random.Random(1)
    image = Image.frombytes("RGB", size, rng.randbytes(size[0] * size[1] * 3))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("fmt", "mime"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"), ("WEBP", "image/webp"),
     ("BMP", "image/bmp")],
)  # fmt: skip
def test_detects_by_magic_bytes(fmt: str, mime: str) -> None:
    assert detect_image_mime_type(_encode((4, 4), fmt)) == mime


def test_rejects_lookalikes() -> None:
    assert detect_image_mime_type(b"hello, I am text in x.png") is None
    assert detect_image_mime_type(b"\xff\xd8\xff\xf7rest") is None
    png = _encode((4, 4), "PNG")
    apng = png[:33] + struct.pack(">I", 8) + b"acTL" + b"\0" * 8 + b"\0\0\0\0" + png[33:]
    assert detect_image_mime_type(apng) is None
    bmp = bytearray(_encode((4, 4), "BMP"))
    bmp[28] = 7  # bits per pixel no BMP has
    assert detect_image_mime_type(bytes(bmp)) is None


def test_small_png_kept_as_is() -> None:
    data = _encode((10, 10), "PNG")
    result = process_image(data, "image/png")
    assert (result.mime_type, result.data, result.hints) == ("image/png", data, [])


def test_bmp_converted_to_png() -> None:
    for auto_resize in (True, False):
        result = process_image(_encode((5, 5), "BMP"), "image/bmp", auto_resize=auto_resize)
        assert result.mime_type == "image/png"
        assert result.data is not None and result.data[0] == 0x89
        assert result.hints == ["[Image converted from image/bmp to image/png.]"]


def test_large_image_resized_with_hint() -> None:
    result = process_image(_encode((2400, 4800), "PNG"), "image/png")
    assert result.data is not None
    with Image.open(io.BytesIO(result.data)) as image:
        assert image.size == (1000, 2000)
    assert result.hints == [
        "[Image: original 2400x4800, displayed at 1000x2000. Multiply coordinates by 2.40 to map "
        "to original image.]"
    ]


def test_auto_resize_off_keeps_large_image() -> None:
    data = _encode((2400, 100), "PNG")
    assert process_image(data, "image/png", auto_resize=False).data == data


def test_byte_limit_forces_smaller_encoding() -> None:
    data = _noise((1300, 1300))  # about 5 MB of PNG: over the base64 limit
    assert len(base64.b64encode(data)) > 4_718_592
    result = process_image(data, "image/png")
    assert result.data is not None
    assert len(base64.b64encode(result.data)) < 4_718_592
    assert result.hints and result.hints[0].startswith("[Image: original 1300x1300, displayed at ")


def test_undecodable_bmp_is_omitted() -> None:
    result = process_image(b"BM" + b"\0" * 40, "image/bmp")
    assert result.data is None
    assert result.omitted == CONVERSION_FAILED


def test_fit_rounds_like_the_reference() -> None:
    """3000x1000 is displayed at 2000x667 by the reference (rounded, not floored)."""
    result = process_image(_encode((3000, 1000), "JPEG"), "image/jpeg")
    assert result.hints == [
        "[Image: original 3000x1000, displayed at 2000x667. Multiply coordinates by 1.50 to map "
        "to original image.]"
    ]
