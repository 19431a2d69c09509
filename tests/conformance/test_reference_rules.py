"""Rules taken from the reference tools (pi-tools.md) where one backend once disagreed with another.

- ``detect_image_mime_type`` sniffs by the reference's magic-byte rules (section 2.1): a PNG
  signature alone is not a PNG, ``GIF`` alone is a GIF, JPEG ``FF D8 FF F7`` is not a JPEG.
"""

from __future__ import annotations

import pytest

from tests.conformance._workspace import Workspace

IHDR = b"\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (SIGNATURE + bytes(64), None),  # the signature alone: no IHDR of length 13
        (SIGNATURE, None),
        (SIGNATURE + IHDR + b"\x00\x00\x00\x08acTL" + bytes(12), None),  # animated PNG
        (SIGNATURE + IHDR, "image/png"),
        (b"\xff\xd8\xff\xf7rest", None),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF8 is not a version", "image/gif"),
    ],
    ids=["signature-then-zeros", "signature-only", "apng", "ihdr", "jpeg-f7", "jpeg", "gif"],
)
async def test_image_sniff_follows_the_reference(
    ws: Workspace, content: bytes, expected: str | None
) -> None:
    ws.write_raw("picture.png", content)
    assert await ws.ops.detect_image_mime_type(ws.path("picture.png")) == expected
