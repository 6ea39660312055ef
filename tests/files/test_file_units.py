"""The pieces of `bot.files` on their own: sniffing, fitting text, images, costs, vision."""

from __future__ import annotations

import base64
import io
import struct
import zipfile
import zlib

import pytest
import tiktoken
from PIL import Image

from bot.files.image_cost import image_tokens, part_tokens
from bot.files.images import MAX_SIDE, ImageUnreadable, prepare_image
from bot.files.sniff import sniff
from bot.files.text import inline_text, looks_like_log
from bot.files.vision import Vision
from bot.tokens import TokenCounter
from testkit.files import LAST_LOG_LINE, make_log, make_pdf, make_png

ENC = tiktoken.get_encoding("o200k_base")  # the independent count (gpt-4o-mini's encoding)


def _zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("a.txt", "hello")
    return out.getvalue()


def test_sniff_goes_by_content_not_by_name_or_declared_type() -> None:
    assert sniff(_zip(), "text/plain").kind == "binary"  # "notes.txt" that is a zip
    assert sniff(make_pdf(), "text/plain").label == "PDF document"
    assert sniff(make_log(2000), "application/octet-stream").kind == "text"  # build.out
    assert sniff(make_png(20, 20), "application/octet-stream").mime_type == "image/png"
    assert sniff(b"\x00\x01\x02binary\x00" * 50, "text/plain").kind == "binary"
    utf16 = "name,total\nÅsa,3\n".encode("utf-16")
    assert sniff(utf16, "text/csv").encoding == "utf-16"
    assert sniff('{"a": "é"}'.encode(), "application/json").mime_type == "application/json"
    assert sniff("caf\xe9 cr\xe8me\n".encode("cp1252"), "").encoding == "cp1252"


def test_a_2mb_log_keeps_its_tail_within_the_cap() -> None:
    counter = TokenCounter("gpt-4o-mini")
    text = make_log(2 * 1024 * 1024).decode()
    shown = inline_text(counter, "server.log", text, 2000)
    assert shown.kept == "tail" and shown.cut_bytes > 1_900_000
    assert shown.text.rstrip().endswith(LAST_LOG_LINE)
    assert len(ENC.encode(shown.text)) <= 2000
    assert text.endswith(shown.text)  # a true suffix, starting on a whole line
    assert shown.text.startswith("2026-11-30T")


def test_other_text_keeps_head_and_tail_and_says_what_was_cut() -> None:
    counter = TokenCounter("gpt-4o-mini")
    rows = "\n".join(f"{i},customer-{i},{i * 3}.50" for i in range(40_000))
    text = "id,name,total\n" + rows + "\n"
    shown = inline_text(counter, "orders.csv", text, 1000)
    assert shown.kept == "head and tail"
    assert shown.text.startswith("id,name,total\n0,customer-0")
    assert "39999,customer-39999" in shown.text and "cut here" in shown.text
    assert len(ENC.encode(shown.text)) <= 1000
    small = inline_text(counter, "orders.csv", "id\n1\n", 1000)
    assert small.kept == "all" and small.text == "id\n1\n"


def test_log_detection_by_name_or_timestamps() -> None:
    assert looks_like_log("app.log", "x")
    assert looks_like_log("build-log.txt", "x")
    assert looks_like_log("output.txt", make_log(3000).decode())
    assert not looks_like_log("main.py", "import os\n\ndef main():\n    pass\n")


def test_images_are_downscaled_reencoded_and_costed() -> None:
    prepared = prepare_image(make_png(3000, 2000))
    assert max(prepared.width, prepared.height) == MAX_SIDE
    assert (prepared.original_width, prepared.original_height) == (3000, 2000)
    assert prepared.data_url.startswith("data:image/jpeg;base64,")  # opaque: JPEG
    raw = base64.b64decode(prepared.data_url.split(",", 1)[1])
    assert Image.open(io.BytesIO(raw)).size == (prepared.width, prepared.height)
    part = {"type": "image_url", "image_url": {"url": prepared.data_url, "detail": "high"}}
    # 1536x1024 -> 1152x768 -> 3x2 tiles: 85 + 6 * 170 (OpenAI's published rule)
    assert part_tokens(part) == 1105 == image_tokens(1536, 1024)
    assert part_tokens({"type": "image_url", "image_url": {"url": "x", "detail": "low"}}) == 85
    transparent = prepare_image(make_png(100, 50, alpha=True))
    assert transparent.data_url.startswith("data:image/png;base64,")


def _png_header_only(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    idat = zlib.compress(b"\x00" * 64)
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", 13)
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
        + struct.pack(">I", len(idat))
        + b"IDAT"
        + idat
        + struct.pack(">I", zlib.crc32(b"IDAT" + idat))
    )


def test_decompression_bombs_and_garbage_are_refused_before_decoding() -> None:
    with pytest.raises(ImageUnreadable):
        prepare_image(_png_header_only(60_000, 60_000))  # 3.6 gigapixels claimed
    with pytest.raises(ImageUnreadable):
        prepare_image(_png_header_only(8000, 6000))  # 48 MP, over our own limit
    with pytest.raises(ImageUnreadable):
        prepare_image(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    with pytest.raises(ImageUnreadable):
        prepare_image(make_pdf())  # not a format we open at all


def test_vision_auto_by_model_name_and_after_a_refusal() -> None:
    assert Vision("auto", "gpt-4o-mini").enabled
    assert not Vision("auto", "gpt-3.5-turbo").enabled
    assert not Vision("auto", "llama3.1:8b").enabled
    assert Vision("auto", "llama3.2-vision").enabled
    assert Vision("auto", "qwen2.5-vl-7b").enabled
    assert Vision("on", "gpt-3.5-turbo").enabled
    assert not Vision("off", "gpt-4o").enabled
    auto = Vision("auto", "my-local-model")
    assert auto.enabled
    auto.refused()
    assert not auto.enabled


async def test_the_fake_server_refuses_image_parts_for_a_text_only_model() -> None:
    """The oracle the vision fallback is tested against: 400, as OpenAI answers gpt-3.5-turbo."""
    import openai

    from testkit.fakes.openai_server import FakeOpenAI

    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    async with FakeOpenAI() as fake:
        client = openai.AsyncOpenAI(api_key="k", base_url=fake.base_url, max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(
                model="gpt-3.5-turbo", messages=[{"role": "user", "content": parts}]
            )
        assert "image_url is only supported by certain models" in str(refused.value)
        ok = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": parts}]
        )
        assert ok.choices[0].message.content == "ok: what is this?"
        await client.close()
