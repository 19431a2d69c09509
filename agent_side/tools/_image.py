"""Images for ``read``: recognise them by their magic bytes, fit them within the inline limits.

Detection looks only at the first bytes (an image named ``notes.txt`` is an image; text named
``x.png`` is text). Processing keeps PNG, JPEG, GIF and WebP as they are when they fit, converts
BMP to PNG, and otherwise scales down until both the dimensions and the base64 size fit. Pillow
does the pixel work; byte-identical output with the reference's encoder is not a goal, the decision
rules, limits, hints and messages are.
"""

from __future__ import annotations

import contextlib
import io
import math
import struct
from dataclasses import dataclass, field

__all__ = [
    "IMAGE_MAX_BASE64_BYTES",
    "IMAGE_MAX_DIMENSION",
    "ProcessedImage",
    "detect_image_mime_type",
    "process_image",
]

SNIFF_BYTES = 4100  # enough for every signature checked here
IMAGE_MAX_DIMENSION = 2000  # pixels per side that providers accept without rescaling
IMAGE_MAX_BASE64_BYTES = 4_718_592  # 4.5 MiB of base64: under the providers' 5 MB image cap
JPEG_QUALITIES = (80, 85, 70, 55, 40)  # tried in this order after PNG
SHRINK_FACTOR = 0.75  # each retry scales both sides by this

INLINE_MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
CONVERSION_FAILED = "[Image omitted: could not be converted to a supported inline image format.]"
RESIZE_FAILED = "[Image omitted: could not be resized below the inline image size limit.]"


def detect_image_mime_type(data: bytes) -> str | None:
    """The image type of ``data`` by magic bytes: png, jpeg, gif, webp, bmp, or ``None``."""
    head = data[:SNIFF_BYTES]
    if head[:3] == b"\xff\xd8\xff" and (len(head) < 4 or head[3] != 0xF7):
        return "image/jpeg"
    if _is_static_png(head):
        return "image/png"
    if head[:3] == b"GIF":
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if _is_bmp(head):
        return "image/bmp"
    return None


def _is_static_png(head: bytes) -> bool:
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[8:16] != b"\x00\x00\x00\x0dIHDR":
        return False
    offset = 8
    while offset + 8 <= len(head):
        length = struct.unpack(">I", head[offset : offset + 4])[0]
        kind = head[offset + 4 : offset + 8]
        if kind == b"acTL":
            return False  # animated PNG: not an inline image
        if kind == b"IDAT":
            return True
        offset += 12 + length
    return True


def _is_bmp(head: bytes) -> bool:
    if head[:2] != b"BM" or len(head) < 30:
        return False
    dib = struct.unpack("<I", head[14:18])[0]
    if dib == 12:
        planes, bpp = struct.unpack("<HH", head[22:26])
    elif 40 <= dib <= 124:
        planes, bpp = struct.unpack("<HH", head[26:30])
    else:
        return False
    return planes == 1 and bpp in (1, 4, 8, 16, 24, 32)


@dataclass(frozen=True, slots=True)
class ProcessedImage:
    """The image to send (``data`` is ``None`` when it had to be omitted) and the notes to add."""

    mime_type: str
    data: bytes | None
    hints: list[str] = field(default_factory=list)
    omitted: str | None = None


def _base64_size(size: int) -> int:
    return math.ceil(size / 3) * 4


def process_image(data: bytes, mime_type: str, *, auto_resize: bool = True) -> ProcessedImage:
    """Make ``data`` sendable inline: convert non-inline formats, fit it within the limits."""
    try:
        from PIL import Image, ImageOps
    except ImportError:  # pragma: no cover - Pillow is a dependency
        return _unprocessed(data, mime_type, auto_resize)
    try:
        image: Image.Image = Image.open(io.BytesIO(data))
        image.load()
    except Exception:
        return _unprocessed(data, mime_type, auto_resize)
    hints: list[str] = []
    with contextlib.suppress(Exception):  # a broken EXIF block is not worth failing the read
        image = ImageOps.exif_transpose(image) or image
    width, height = image.size
    if mime_type not in INLINE_MIME_TYPES:
        data = _encode(image, "PNG")
        hints.append(f"[Image converted from {mime_type} to image/png.]")
        mime_type = "image/png"
    if not auto_resize:
        return ProcessedImage(mime_type, data, hints)
    fits = width <= IMAGE_MAX_DIMENSION and height <= IMAGE_MAX_DIMENSION
    if fits and _base64_size(len(data)) < IMAGE_MAX_BASE64_BYTES:
        return ProcessedImage(mime_type, data, hints)
    target = _fit(width, height)
    while True:
        resized = image.resize(target, Image.Resampling.LANCZOS)
        candidate = _smallest_fitting(resized)
        if candidate is not None:
            out_mime, out = candidate
            factor = f"{width / target[0]:.2f}"
            hints.append(
                f"[Image: original {width}x{height}, displayed at {target[0]}x{target[1]}. "
                f"Multiply coordinates by {factor} to map to original image.]"
            )
            return ProcessedImage(out_mime, out, hints)
        if target == (1, 1):
            return ProcessedImage(mime_type, None, hints, RESIZE_FAILED)
        target = (
            max(1, math.floor(target[0] * SHRINK_FACTOR)),
            max(1, math.floor(target[1] * SHRINK_FACTOR)),
        )


def _fit(width: int, height: int) -> tuple[int, int]:
    """Scale down to fit the maximum dimension, keeping the aspect ratio (rounded half up)."""
    if width > IMAGE_MAX_DIMENSION:
        height = max(1, math.floor(height * IMAGE_MAX_DIMENSION / width + 0.5))
        width = IMAGE_MAX_DIMENSION
    if height > IMAGE_MAX_DIMENSION:
        width = max(1, math.floor(width * IMAGE_MAX_DIMENSION / height + 0.5))
        height = IMAGE_MAX_DIMENSION
    return width, height


def _unprocessed(data: bytes, mime_type: str, auto_resize: bool) -> ProcessedImage:
    """An image Pillow cannot decode (a corrupt PNG, text starting with ``GIF8``), as the
    reference treats it: a format providers take is sent as is only when resizing is off (it
    cannot be measured); otherwise it is omitted with the resize or the conversion message."""
    if mime_type not in INLINE_MIME_TYPES:
        return ProcessedImage(mime_type, None, [], CONVERSION_FAILED)
    if not auto_resize:
        return ProcessedImage(mime_type, data)
    return ProcessedImage(mime_type, None, [], RESIZE_FAILED)


def _smallest_fitting(image: object) -> tuple[str, bytes] | None:
    png = _encode(image, "PNG")
    if _base64_size(len(png)) < IMAGE_MAX_BASE64_BYTES:
        return "image/png", png
    for quality in JPEG_QUALITIES:
        jpeg = _encode(image, "JPEG", quality=quality)
        if _base64_size(len(jpeg)) < IMAGE_MAX_BASE64_BYTES:
            return "image/jpeg", jpeg
    return None


def _encode(image: object, fmt: str, **options: int) -> bytes:
    from PIL import Image

    assert isinstance(image, Image.Image)
    if fmt == "JPEG" and image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    elif fmt == "PNG" and image.mode not in ("1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16"):
        image = image.convert("RGBA")
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()
