"""Shared files through a real BotApp (SQLite, FakeOpenAI over HTTP): what reaches the model,
what is stored, and the clear replies when limits are crossed."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import tiktoken

from bot.messages import Attachment
from testkit.fakes.openai_server import FakeOpenAI
from testkit.files import LAST_LOG_LINE, MemoryFetch, attachment, make_log, make_pdf, make_png
from tests.helpers import CollectingSink, message
from tests.support.token_oracle import request_tokens

ENC = tiktoken.get_encoding("o200k_base")


def _user_content(request: dict[str, Any]) -> Any:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


def _request_tokens(request: dict[str, Any]) -> int:
    """The prompt as the server received it, counted independently of the bot's counter."""
    return request_tokens(request, reply=False)


async def _send(app: Any, text: str, *files: Attachment) -> CollectingSink:
    sink = CollectingSink()
    await app.handle_message(replace(message(text), attachments=tuple(files)), sink)
    return sink


async def test_a_2mb_log_reaches_the_model_as_its_tail_within_budget(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    data = make_log(2 * 1024 * 1024)
    log = attachment("server.log", data, "text/plain")
    sink = await _send(app, "what is wrong in this log?", log)
    assert sink.final and not sink.error
    request = fake_openai.requests[-1]
    content = _user_content(request)
    assert isinstance(content, str)
    assert content.startswith("what is wrong in this log?")
    assert LAST_LOG_LINE in content
    assert re.search(r"only its last \d+\.\d KB are shown: the first 2\.0 MB were cut", content)
    budget = app.settings.bot_context_tokens - app.builder.reply_tokens
    assert _request_tokens(request) <= budget
    stored = (await app.store.recent(message("x").session, limit=5))[0]
    assert stored.role == "user" and LAST_LOG_LINE in stored.content
    assert stored.meta["files"][0] == {
        "name": "server.log",
        "mime_type": "text/plain",
        "size": len(data),
        "kind": "text",
        "shown": "tail",
    }


async def test_a_png_goes_as_an_image_part_to_a_vision_model_and_is_not_stored(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(bot_model="gpt-4o-mini")
    png = attachment("screenshot.png", make_png(2880, 1800), "image/png")
    sink = await _send(app, "why does this fail?", png)
    assert sink.final and not sink.error
    content = _user_content(fake_openai.requests[-1])
    assert isinstance(content, list) and content[0]["type"] == "text"
    assert "screenshot.png" in content[0]["text"] and "2880x1800" in content[0]["text"]
    image = content[1]["image_url"]
    assert image["url"].startswith("data:image/jpeg;base64,") and image["detail"] == "high"
    assert _request_tokens(fake_openai.requests[-1]) <= app.builder.prompt_budget
    stored = (await app.store.recent(message("x").session, limit=5))[0]
    assert "screenshot.png" in stored.content and "base64" not in stored.content
    assert "base64" not in json.dumps(stored.meta)
    # The next turn's history names the image, and carries no image part.
    await _send(app, "and now?")
    later = fake_openai.requests[-1]["messages"]
    assert all(isinstance(m.get("content"), str | None) for m in later)


async def test_a_text_only_model_gets_a_note_instead_of_the_image(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(bot_model="gpt-3.5-turbo")  # BOT_VISION=auto knows it takes no images
    sink = await _send(app, "", attachment("shot.png", make_png(400, 300), "image/png"))
    assert sink.final and not sink.error
    assert len(fake_openai.requests) == 1
    content = _user_content(fake_openai.requests[0])
    assert isinstance(content, str)
    assert "[image: shot.png" in content and "cannot see images" in content


async def test_a_server_refusing_image_parts_gets_the_note_and_the_turn_is_answered(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    # BOT_VISION=on for a model the server says takes no images: like the tools fallback.
    app = await make_app(bot_model="gpt-3.5-turbo", bot_vision="on")
    sink = await _send(app, "look", attachment("shot.png", make_png(400, 300), "image/png"))
    assert sink.final and not sink.error
    first, second = fake_openai.requests
    assert isinstance(_user_content(first), list)  # refused with 400 by the fake, as OpenAI does
    assert isinstance(_user_content(second), str) and "cannot see images" in _user_content(second)
    assert second["tools"]  # only the images were dropped

    fake_openai.text_only_models = ("my-local-model",)
    auto = await make_app(bot_model="my-local-model")  # auto: a name it does not know: tried once
    fake_openai.reset()
    for _ in range(2):
        await _send(auto, "look", attachment("shot.png", make_png(40, 30), "image/png"))
    kinds = [type(_user_content(r)).__name__ for r in fake_openai.requests]
    assert kinds == ["list", "str", "str"]  # the refusal is remembered


async def test_a_pdf_is_named_with_its_size_and_not_read(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    sink = await _send(app, "summarise", attachment("report.pdf", make_pdf(), "application/pdf"))
    assert sink.final
    content = _user_content(fake_openai.requests[-1])
    assert "[file: report.pdf (PDF document, " in content and "not read" in content
    assert "/Catalog" not in content


async def test_a_file_only_message_is_answered(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app = await make_app()
    data = b"name,qty\ntea,3\n"
    sink = await _send(app, "", attachment("orders.csv", data, "text/csv"))
    assert sink.final and "Did you mean" not in sink.final
    content = _user_content(fake_openai.requests[-1])
    assert (
        content
        == "[file: orders.csv (text/csv, 15 B) — whole file]\nname,qty\ntea,3\n[end of orders.csv]"
    )


async def test_too_many_files_get_a_clear_reply_and_nothing_is_fetched(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(bot_max_files=5)
    files = [attachment(f"f{i}.txt", b"hello") for i in range(6)]
    sink = await _send(app, "here you go", *files)
    assert sink.final is not None and "6 files" in sink.final and "at most 5" in sink.final
    assert fake_openai.requests == []
    assert all(f.fetch.calls == [] for f in files)  # type: ignore[attr-defined]
    assert await app.store.recent(message("x").session, limit=5) == []


async def test_size_limits_and_failed_downloads_are_named_not_fatal(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(
        bot_max_files=6,
        bot_file_max_bytes=4096,
        bot_files_max_total_bytes=6000,
        bot_file_timeout=0.2,
    )
    big = attachment("big.log", b"x" * 10_000)
    ok = attachment("a.txt", b"a" * 3000)
    over_total = attachment("b.txt", b"b" * 3500)
    gone = attachment("gone.txt", b"", error="the file was deleted")
    slow = attachment("slow.txt", b"zz", stall=5.0)
    lying = attachment("lying.txt", b"y" * 5000, size=10)  # reported 10 bytes, sends 5,000
    sink = await _send(app, "check", big, ok, over_total, gone, slow, lying)
    assert sink.final and not sink.error
    content = _user_content(fake_openai.requests[-1])
    assert "[file: big.log" in content and "larger than the 4.0 KB limit per file" in content
    assert big.fetch.calls == []  # type: ignore[attr-defined]
    assert "a" * 3000 in content
    assert "[file: b.txt" in content and "may total at most" in content
    assert "could not be downloaded: the file was deleted" in content
    assert "could not be downloaded: the download took longer than 0.2 seconds" in content
    assert "[file: lying.txt" in content and "could not be downloaded" in content


async def test_an_adapter_fetch_bug_is_a_note_not_a_failed_turn(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    class Broken(MemoryFetch):
        async def __call__(self, max_bytes: int) -> bytes:
            raise RuntimeError("boom")

    app = await make_app()
    broken = Attachment("x.txt", "text/plain", 3, Broken(b"abc"))
    sink = await _send(app, "hi", broken)
    assert sink.final and not sink.error
    assert "could not be downloaded: the download failed" in _user_content(fake_openai.requests[-1])
