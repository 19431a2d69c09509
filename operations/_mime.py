"""``detect_image_mime_type``: recognise an image by its first bytes, never by its name.

The rules of the reference read tool (pi-tools.md section 2.1), limited to the four types the
protocol names: JPEG (``FF D8 FF``, not followed by ``F7``), PNG (signature and a 13-byte IHDR;
an ``acTL`` chunk before ``IDAT`` means an animated PNG, which is refused), GIF, and WebP.
"""

from __future__ import annotations

import struct

__all__ = ["IMAGE_SNIFF_BYTES", "sniff_image_mime_type"]

IMAGE_SNIFF_BYTES = 4100
"""How many leading bytes a backend reads to sniff (the reference's file-type window)."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _is_still_png(head: bytes) -> bool:
    if not head.startswith(_PNG_SIGNATURE) or head[12:16] != b"IHDR":
        return False
    if struct.unpack(">I", head[8:12])[0] != 13:
        return False
    offset = 8
    while offset + 8 <= len(head):
        length = struct.unpack(">I", head[offset : offset + 4])[0]
        chunk = head[offset + 4 : offset + 8]
        if chunk == b"acTL":
            return False
        if chunk == b"IDAT":
            return True
        offset += 12 + length
    return True


def sniff_image_mime_type(head: bytes) -> str | None:
    """``"image/png"``, ``"image/jpeg"``, ``"image/gif"``, ``"image/webp"``, or ``None``."""
    if head[:3] == b"\xff\xd8\xff" and head[3:4] != b"\xf7":
        return "image/jpeg"
    if _is_still_png(head):
        return "image/png"
    if head[:3] == b"GIF":
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None
