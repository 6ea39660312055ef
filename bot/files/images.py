"""Images as model input: checked, downscaled and re-encoded with Pillow, as a data URL.

Safety: only a short list of raster formats is opened (no PDF/EPS/SVG, nothing that runs a
delegate program); the pixel count is checked from the header before anything is decoded
(decompression bombs); animated images give their first frame. Re-encoding also drops metadata
(EXIF GPS positions do not reach the model). CPU-bound: `prepare_image` runs off the event loop.

Memory: a small file can be a huge image (a 155 KB PNG of 6320x6320 pixels is 160 MB decoded),
so pixels per image are not enough of a bound. `plan_image` estimates, from the header alone,
the bytes a decode will hold at its peak (`ImagePlan.cost`): JPEGs are decoded at a reduced
scale (`draft`: libjpeg's DCT scaling, at least the size sent), other formats whole — Pillow
cannot do less — and are then reduced in tiles, so no second full-size copy is ever made (a
whole-image `reduce`/`thumbnail` of RGBA makes a premultiplied one, `exif_transpose` another).
An image whose cost is over `DECODE_BUDGET_BYTES` is refused with a note saying so;
`prepare_image_bounded` reserves its cost in the process-wide `DECODE_BUDGET` before decoding,
so concurrent decodes together stay within it too (others wait, up to `DECODE_WAIT_SECONDS`,
then the person is told the bot is busy reading other images), and runs them on one thread.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import math
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from PIL import ExifTags, Image

from bot.files.decode_budget import DecodeBudget

MAX_SIDE = 1536  # longest side sent; OpenAI's high detail uses at most 768 on the short side
MAX_PIXELS = 40_000_000  # refuse to decode beyond this (a 8000x5000 photo is 40 MP)
FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF")
JPEG_QUALITY = 85
# All image decodes of the process together (and so any one of them): a 40 MP RGBA PNG fits.
DECODE_BUDGET_BYTES = 256 * 1024 * 1024
DECODE_WAIT_SECONDS = 30.0  # longest wait for room in the budget before telling the person
TILE_SIDE = 1024  # pixels per side of the tiles a full-size decode is reduced in
# Tiles in flight, the re-encoded output and its data URL (measured well under this).
FIXED_OVERHEAD = 24 * 1024 * 1024

DECODE_BUDGET = DecodeBudget(DECODE_BUDGET_BYTES)
# Decodes run on one thread of their own: glibc gives each thread its own malloc arena and keeps
# what a decode freed in it, so decodes spread over the default pool's threads each left their
# peak behind (six 6320x6320 PNGs one after another: +894 MB; on one thread: +191 MB).
_DECODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="image-decode")

# Pillow's own guard (a warning past this, an error past twice this) as a second line behind
# the checks here, which refuse anything over MAX_PIXELS from the header alone.
Image.MAX_IMAGE_PIXELS = MAX_PIXELS * 2

_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")
# Bytes per decoded pixel beyond Pillow's own image, by format: WebP's decoder keeps its
# canvas and hands over a copy of the frame (two more RGBA buffers); libtiff may read through
# an RGBA buffer of its own.
_DECODER_EXTRA = {"WEBP": 11, "TIFF": 4}  # measured: WebP holds 15.5 bytes per pixel


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


@dataclass(frozen=True, slots=True)
class ImagePlan:
    """How an image will be decoded, and the most memory that takes (bytes)."""

    width: int  # as in the file
    height: int
    decode_width: int  # as decoded (smaller for a JPEG decoded at a reduced scale)
    decode_height: int
    factor: int  # integer reduction applied in tiles after decoding
    cost: int


def _pixel_bytes(mode: str) -> int:
    """Bytes Pillow stores per pixel of `mode` (RGB takes 4, like RGBA)."""
    if mode in ("1", "L", "P"):
        return 1
    if mode.startswith("I;16"):
        return 2
    return 4


def _fit(width: int, height: int, max_side: int) -> tuple[int, int]:
    scale = min(1.0, max_side / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _coefficient_planes(img: Image.Image) -> float:
    """Full-size planes of DCT coefficients a JPEG holds: one per component, less for a
    subsampled one (4:2:0 colour is 1.5 planes)."""
    layers: list[tuple[Any, int, int, Any]] = list(getattr(img, "layer", None) or ())
    try:
        hmax = max(int(h) for _, h, _, _ in layers)
        vmax = max(int(v) for _, _, v, _ in layers)
        return sum(int(h) * int(v) for _, h, v, _ in layers) / (hmax * vmax)
    except (TypeError, ValueError, ZeroDivisionError):
        return float(max(len(img.getbands()), 1))


def _webp_size(data: bytes) -> tuple[int, int] | None:
    """A WebP's canvas size from its first chunk header (Pillow's decoder allocates the
    canvas when the file is opened, so the size is checked before that)."""
    head = data[:30]
    if len(head) < 30 or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        return None
    chunk = head[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L":
        bits = struct.unpack("<I", head[21:25])[0]
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _check_pixels(width: int, height: int) -> None:
    if width * height > MAX_PIXELS:
        raise ImageUnreadable(f"{width}x{height} pixels is too large to open")


def _estimate(
    width: int, height: int, dw: int, dh: int, pixel_bytes: int, extra: int, max_side: int
) -> ImagePlan:
    """The plan for a `width`x`height` image decoded at `dw`x`dh`, `pixel_bytes` each (plus
    `extra` bytes the decoder keeps); `ImageUnreadable` when it is over the budget alone."""
    target = _fit(width, height, max_side)
    factor = max(1, min(dw // target[0], dh // target[1]))
    decoded = dw * dh * pixel_bytes
    reduced = math.ceil(dw / factor) * math.ceil(dh / factor) * 4
    # The reduced image, thumbnail's premultiplied copy of it and its result.
    cost = decoded + extra + 3 * reduced + FIXED_OVERHEAD
    if cost > DECODE_BUDGET_BYTES:
        mb = 1024 * 1024
        raise ImageUnreadable(
            f"at {width}x{height} pixels it would take about {cost // mb} MB of memory to "
            f"open, more than the {DECODE_BUDGET_BYTES // mb} MB I use for images; a smaller "
            "or more compressed version would work"
        )
    return ImagePlan(width, height, dw, dh, factor, cost)


def _webp_plan(data: bytes, max_side: int) -> ImagePlan | None:
    """A WebP's plan from its first chunk alone: Pillow's decoder allocates the whole canvas
    when the file is opened, so that must be within the limits before it is."""
    size = _webp_size(data)
    if size is None:
        return None
    _check_pixels(*size)
    return _estimate(*size, *size, 4 + _DECODER_EXTRA["WEBP"], 0, max_side)


def _open(data: bytes, max_side: int) -> Image.Image:
    _webp_plan(data, max_side)
    return Image.open(io.BytesIO(data), formats=FORMATS)


def _plan(img: Image.Image, max_side: int) -> ImagePlan:
    """Check `img` (opened, not loaded), set its reduced-scale decode, estimate the cost;
    refuse it when that alone is over the budget."""
    width, height = img.size
    _check_pixels(width, height)
    img.seek(0)
    extra = 0
    if img.format == "JPEG":
        if img.info.get("progressive") or img.info.get("progression"):
            # libjpeg keeps every DCT coefficient of a progressive file: 2 bytes per pixel and
            # component at full size, whatever the scale it decodes at.
            extra = int(width * height * 2 * _coefficient_planes(img))
        # libjpeg decodes at 1/2, 1/4 or 1/8 scale, never below the size sent.
        img.draft("RGB", _fit(width, height, max_side))
    dw, dh = img.size
    pixel_bytes = _pixel_bytes(img.mode) + _DECODER_EXTRA.get(img.format or "", 0)
    return _estimate(width, height, dw, dh, pixel_bytes, extra, max_side)


def plan_image(data: bytes, *, max_side: int = MAX_SIDE) -> ImagePlan:
    """The decode plan from the header alone; `ImageUnreadable` for what will not be opened
    (over the pixel limit, or over the memory budget on its own). Nothing is decoded."""
    try:
        webp = _webp_plan(data, max_side)
        if webp is not None:
            return webp  # not opened: that alone would allocate its canvas
        with _open(data, max_side) as img:
            return _plan(img, max_side)
    except ImageUnreadable:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError, EOFError) as exc:
        raise ImageUnreadable(f"not an image I can open ({type(exc).__name__})") from None


def _reduced(img: Image.Image, factor: int, mode: str) -> Image.Image:
    """`img` in `mode`, shrunk `factor` times by averaging, one tile at a time: each tile's
    conversion (and RGBA's premultiplied copy) is tile-sized, never image-sized."""
    img.load()
    width, height = img.size
    if factor == 1:
        return img if img.mode == mode else img.convert(mode)
    out = Image.new(mode, (math.ceil(width / factor), math.ceil(height / factor)))
    step = max(factor, TILE_SIDE // factor * factor)
    for top in range(0, height, step):
        for left in range(0, width, step):
            tile = img.crop((left, top, min(width, left + step), min(height, top + step)))
            if tile.mode != mode:
                tile = tile.convert(mode)
            out.paste(tile.reduce(factor), (left // factor, top // factor))
    return out


def prepare_image(data: bytes, *, max_side: int = MAX_SIDE) -> PreparedImage:
    """Decode (within the plan's cost), shrink, re-encode. Call it off the event loop; use
    `prepare_image_bounded` where several may run at once."""
    try:
        with _open(data, max_side) as img:
            plan = _plan(img, max_side)
            img.load()
            orientation = img.getexif().get(ExifTags.Base.Orientation)
            has_alpha = img.mode in _ALPHA_MODES or "transparency" in img.info
            frame = _reduced(img, plan.factor, "RGBA" if has_alpha else "RGB")
            frame.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            if orientation in _TRANSPOSE:
                frame = frame.transpose(_TRANSPOSE[orientation])
            if has_alpha:
                has_alpha = frame.getchannel("A").getextrema() != (255, 255)  # screenshots
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
    return PreparedImage(url, size[0], size[1], plan.width, plan.height, len(encoded))


async def prepare_image_bounded(
    data: bytes,
    *,
    budget: DecodeBudget = DECODE_BUDGET,
    wait: float = DECODE_WAIT_SECONDS,
    max_side: int = MAX_SIDE,
) -> PreparedImage:
    """`prepare_image` off the loop, within `budget`: the plan first (header only), then room
    for its cost, then the decode. The reservation is held until the decode's thread is done,
    even when the turn is cancelled meanwhile (the memory is in use until then)."""
    plan = await asyncio.to_thread(plan_image, data, max_side=max_side)
    if plan.cost > budget.capacity:
        raise ImageUnreadable(
            f"at {plan.width}x{plan.height} pixels it would take more memory to open than I "
            "use for images"
        )
    try:
        await budget.acquire(plan.cost, wait)
    except TimeoutError:
        raise ImageUnreadable(
            "I am busy opening other large images right now; please send it again in a minute"
        ) from None
    loop = asyncio.get_running_loop()
    try:
        work = loop.run_in_executor(
            _DECODER, functools.partial(prepare_image, data, max_side=max_side)
        )
    except BaseException:  # the executor is shut down (interpreter exit): nothing will run
        budget.release(plan.cost)
        raise

    def done(task: asyncio.Future[PreparedImage]) -> None:
        budget.release(plan.cost)
        if not task.cancelled():
            task.exception()  # retrieved here too, for when nobody awaits it any more

    work.add_done_callback(done)
    return await asyncio.shield(work)
