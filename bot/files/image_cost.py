"""Token cost of an image part, so the context budget holds with images in it.

OpenAI's published rule for its vision models: `low` detail costs 85 tokens; `high` detail scales
the image to fit 2048x2048, then its shortest side to 768, and costs 85 + 170 per 512-pixel tile.
Other OpenAI-compatible servers count differently; this is the figure the budget reserves.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from functools import lru_cache
from typing import Any

BASE_TOKENS = 85
TILE_TOKENS = 170
# Our own downscale keeps images within MAX_SIDE (bot.files.images), whose worst case is this:
HIGH_DETAIL_BOUND = BASE_TOKENS + TILE_TOKENS * 6


def image_tokens(width: int, height: int, detail: str = "high") -> int:
    if detail == "low" or width <= 0 or height <= 0:
        return BASE_TOKENS
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return BASE_TOKENS + TILE_TOKENS * math.ceil(w / 512) * math.ceil(h / 512)


@lru_cache(maxsize=64)
def _data_url_size(url: str) -> tuple[int, int] | None:
    """Width and height from a data URL's image header (Pillow reads the header only)."""
    from PIL import Image

    _, _, payload = url.partition(",")
    try:
        raw = base64.b64decode(payload, validate=False)
        with Image.open(io.BytesIO(raw)) as img:
            return int(img.width), int(img.height)
    except (binascii.Error, OSError, ValueError, Image.DecompressionBombError):
        return None


def part_tokens(part: dict[str, Any]) -> int:
    """Tokens one `image_url` content part costs (an upper bound when its size is unknown)."""
    image = part.get("image_url") or {}
    detail = str(image.get("detail") or "auto")
    if detail == "low":
        return BASE_TOKENS
    url = str(image.get("url") or "")
    size = _data_url_size(url) if url.startswith("data:image/") else None
    if size is None:
        return HIGH_DETAIL_BOUND
    return image_tokens(*size)
