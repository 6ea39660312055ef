"""Files as people share them, made in memory: logs, screenshots, PDFs, and attachments of them."""

from __future__ import annotations

import io
import random
import struct
import zlib
from dataclasses import dataclass, field

from PIL import Image, ImageDraw

from bot.messages import Attachment, AttachmentError

LAST_LOG_LINE = (
    "2026-11-30T23:59:59Z ERROR worker-7 payment gateway timed out after 30s (order #W42)"
)


def make_log(size: int, *, seed: int = 7) -> bytes:
    """A server log of about `size` bytes whose last line is `LAST_LOG_LINE`."""
    rng = random.Random(seed)
    levels = ["INFO", "INFO", "INFO", "DEBUG", "WARN"]
    lines: list[str] = []
    total = 0
    n = 0
    while total < size - len(LAST_LOG_LINE) - 1:
        n += 1
        line = (
            f"2026-11-30T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z "
            f"{rng.choice(levels)} worker-{rng.randint(1, 9)} "
            f"handled request {rng.getrandbits(40):x} in {rng.randint(1, 900)}ms"
        )
        lines.append(line)
        total += len(line) + 1
    lines.append(LAST_LOG_LINE)
    return ("\n".join(lines) + "\n").encode()


def make_png(width: int, height: int, *, alpha: bool = False) -> bytes:
    """A screenshot-like PNG (text boxes on a background)."""
    img = Image.new("RGBA" if alpha else "RGB", (width, height), (240, 240, 240))
    draw = ImageDraw.Draw(img)
    for y in range(10, height - 20, 40):
        draw.rectangle((10, y, width - 10, y + 24), outline=(30, 30, 30))
        draw.text((16, y + 6), f"Error 500 at line {y}", fill=(200, 0, 0))
    if alpha:
        draw.rectangle((0, 0, 20, 20), fill=(0, 0, 0, 0))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def make_large_png(width: int, height: int) -> bytes:
    """A small file of a huge opaque-grey RGBA image (a 6320x6320 one is about 160 KB),
    written row by row with zlib: making it never holds the decoded image."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    row = b"\x00" + bytes((200, 200, 200, 255)) * width  # filter type 0, then the pixels
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def make_pdf() -> bytes:
    return (
        b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
        b"2 0 obj << /Type /Pages /Kids [] /Count 0 >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
    )


@dataclass
class MemoryFetch:
    """A `FetchBytes` over bytes in memory that records each call (and can fail or stall)."""

    data: bytes
    calls: list[int] = field(default_factory=list)
    error: str | None = None
    stall: float = 0.0

    async def __call__(self, max_bytes: int) -> bytes:
        import asyncio

        self.calls.append(max_bytes)
        if self.stall:
            await asyncio.sleep(self.stall)
        if self.error:
            raise AttachmentError(self.error)
        if len(self.data) > max_bytes:
            raise AttachmentError("it is larger than the limit per file")
        return self.data


def attachment(
    name: str, data: bytes, mime_type: str = "", *, size: int | None = None, **fetch: object
) -> Attachment:
    return Attachment(
        name=name,
        mime_type=mime_type,
        size=len(data) if size is None else size,
        fetch=MemoryFetch(data, **fetch),  # type: ignore[arg-type]
    )
