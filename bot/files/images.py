"""Images as model input: checked, downscaled and re-encoded with Pillow, as a data URL.

Safety: only a short list of raster formats is opened (no PDF/EPS/SVG, nothing that runs a
delegate program); the pixel count is checked from the header before anything is decoded
(decompression bombs); animated images give their first frame. Re-encoding also drops metadata
(EXIF GPS positions do not reach the model). CPU-bound: call `prepare_image` off the event loop.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

from PIL import Image, ImageOps

MAX_SIDE = 1536  # longest side sent; OpenAI's high detail uses at most 768 on the short side
MAX_PIXELS = 40_000_000  # refuse to decode beyond this (a 8000x5000 photo is 40 MP)
FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF")
JPEG_QUALITY = 85

# Pillow's own guard (a warning past this, an error past twice this) as a second line behind
# the check in `prepare_image`, which refuses anything over MAX_PIXELS from the header alone.
Image.MAX_IMAGE_PIXELS = MAX_PIXELS * 2


class ImageUnreadable(Exception):
    """The bytes are not an image we open, or one too large to decode safely."""


@dataclass(frozen=True, slots=True)
class PreparedImage:
    data_url: str
    width: int  # as sent
    height: int
    original_width: int
    original_height: int
    encoded_bytes: int


def prepare_image(data: bytes, *, max_side: int = MAX_SIDE) -> PreparedImage:
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as img:
            width, height = img.size
            if width * height > MAX_PIXELS:
                raise ImageUnreadable(f"{width}x{height} pixels is too large to open")
            img.seek(0)
            if img.format == "JPEG":
                img.draft("RGB", (max_side, max_side))  # decode JPEGs at a reduced scale
            frame = ImageOps.exif_transpose(img)
            frame.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            has_alpha = frame.mode in ("RGBA", "LA", "PA") or "transparency" in frame.info
            if has_alpha:
                frame = frame.convert("RGBA")
                has_alpha = frame.getchannel("A").getextrema() != (255, 255)  # screenshots: opaque
            out = io.BytesIO()
            if has_alpha:
                frame.save(out, format="PNG")
                mime = "image/png"
            else:
                frame.convert("RGB").save(out, format="JPEG", quality=JPEG_QUALITY)
                mime = "image/jpeg"
            size = frame.size
    except ImageUnreadable:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError, EOFError) as exc:
        raise ImageUnreadable(f"not an image I can open ({type(exc).__name__})") from None
    encoded = out.getvalue()
    url = f"data:{mime};base64,{base64.b64encode(encoded).decode('ascii')}"
    return PreparedImage(url, size[0], size[1], width, height, len(encoded))
