"""Files shared in Slack reach the real core: downloaded from `url_private_download` with the bot
token (FakeSlack checks it), then inlined, shown as image parts or named (FakeOpenAI records)."""

from __future__ import annotations

import re
from typing import Any

from testkit.fakes.openai_server import FakeOpenAI
from testkit.fakes.slack_api import FakeSlack
from testkit.files import LAST_LOG_LINE, make_log, make_pdf, make_png
from testkit.slack_harness import SlackHarness, new_ts
from tests.slack.conftest import StartHarness


async def _dm_files(
    h: SlackHarness, text: str, files: list[dict[str, Any]], *, thread_ts: str | None = None
) -> str:
    ts = new_ts()
    event: dict[str, Any] = {
        "type": "message",
        "subtype": "file_share",
        "channel_type": "im",
        "user": "U1",
        "text": text,
        "ts": ts,
        "channel": "D1",
        "files": files,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    await h.send_event(event)
    return ts


async def _mention_files(h: SlackHarness, text: str, files: list[dict[str, Any]]) -> str:
    ts = new_ts()
    base = {
        "user": "U1",
        "text": f"<@{h.fake.bot_user_id}> {text}",
        "ts": ts,
        "channel": "C1",
        "files": files,
    }
    await h.send_event({"type": "app_mention", **base})
    await h.send_event(
        {"type": "message", "subtype": "file_share", "channel_type": "channel", **base}
    )
    return ts


def _chats(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [r for r in fake.requests if not r.get("response_format")]


def _user_content(request: dict[str, Any]) -> Any:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


async def test_a_2mb_log_is_downloaded_with_the_bot_token_and_its_tail_answered(
    slack_real: SlackHarness, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    log = fake_slack.add_file("server.log", make_log(2 * 1024 * 1024), "text/plain")
    ts = await _mention_files(slack_real, "what is wrong in this log?", [log])
    replies = await slack_real.wait_replies("C1", thread_ts=ts, timeout=20)
    assert replies and replies[0].startswith("ok: what is wrong in this log?")
    assert fake_slack.file_downloads == [(log["id"], fake_slack.bot_token)]  # once, as the bot
    content = _user_content(_chats(fake_openai)[0])
    assert LAST_LOG_LINE in content
    assert re.search(r"server\.log \(text/plain, 2\.0 MB\) — only its last .* were cut", content)

    # A follow-up in the thread: the file is in history, and is not downloaded again.
    await slack_real.wait_done(ts, timeout=10)
    follow = await slack_real.channel_message("and the fix?", thread_ts=ts)
    await slack_real.wait_done(follow, timeout=10)
    assert len(fake_slack.file_downloads) == 1
    history = str(_chats(fake_openai)[-1]["messages"])
    assert LAST_LOG_LINE in history


async def test_a_screenshot_reaches_a_vision_model_as_an_image_part(
    slack_real: SlackHarness, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    png = fake_slack.add_file("screenshot.png", make_png(2560, 1440), "image/png")
    ts = await _dm_files(slack_real, "why does this fail?", [png])
    await slack_real.wait_done(ts, timeout=20)
    content = _user_content(_chats(fake_openai)[0])
    assert isinstance(content, list)
    assert "[image: screenshot.png (PNG image" in content[0]["text"]
    assert content[1]["type"] == "image_url"
    assert content[1]["image_url"]["url"].startswith("data:image/")


async def test_a_screenshot_with_a_text_only_model_becomes_a_clear_note(
    start_harness: StartHarness, make_app: Any, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    h = await start_harness(await make_app(bot_model="gpt-3.5-turbo"))
    png = fake_slack.add_file("screenshot.png", make_png(800, 600), "image/png")
    ts = await _dm_files(h, "", [png])  # a file-only message
    replies = await h.wait_replies("D1", count=1, timeout=20)
    await h.wait_done(ts, timeout=10)
    content = _user_content(_chats(fake_openai)[0])
    assert isinstance(content, str) and "cannot see images" in content
    assert replies[0].startswith("ok: [image: screenshot.png")  # answered, not "say something?"


async def test_a_pdf_is_named_not_read_and_a_file_only_message_is_answered(
    slack_real: SlackHarness, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    pdf = fake_slack.add_file("invoice.pdf", make_pdf(), "application/pdf")
    ts = await _dm_files(slack_real, "", [pdf])
    replies = await slack_real.wait_replies("D1", timeout=20)
    await slack_real.wait_done(ts, timeout=10)
    content = _user_content(_chats(fake_openai)[0])
    assert content.startswith("[file: invoice.pdf (PDF document, ") and "not read" in content
    assert replies[0].startswith("ok: [file: invoice.pdf")


async def test_six_files_when_the_limit_is_five_get_a_clear_reply(
    slack_real: SlackHarness, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    files = [fake_slack.add_file(f"n{i}.txt", b"note\n", "text/plain") for i in range(6)]
    await _dm_files(slack_real, "all my notes", files)
    replies = await slack_real.wait_replies("D1", timeout=20)
    assert "6 files" in replies[0] and "at most 5" in replies[0]  # the turn's last step
    assert fake_slack.file_downloads == [] and _chats(fake_openai) == []


async def test_without_files_read_or_off_slack_the_model_is_told_why(
    slack_real: SlackHarness, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.files_read_scope = False  # Slack answers with its sign-in page
    note = fake_slack.add_file("notes.txt", b"secret plans\n", "text/plain")
    foreign = {**note, "id": "FOTHER", "url_private_download": "https://files.example.com/x"}
    ts = await _dm_files(slack_real, "read these", [note, foreign])
    await slack_real.wait_done(ts, timeout=20)
    content = _user_content(_chats(fake_openai)[0])
    assert "lack the files:read scope" in content and "Sign in" not in content
    assert "not on Slack's file host" in content
    assert [d[0] for d in fake_slack.file_downloads] == [note["id"]]  # the foreign URL: never


async def test_the_bot_token_only_goes_to_slack_file_hosts() -> None:
    from adapters.slack.files import SlackFiles

    files = SlackFiles("http://127.0.0.1:4567/api/")
    try:
        assert files.trusted("https://files.slack.com/files-pri/T1-F1/download/a.png")
        assert files.trusted("http://127.0.0.1:4567/files-pri/T1-F1/download/a.png")
        assert not files.trusted("http://files.slack.com/files-pri/T1-F1/a.png")  # not https
        assert not files.trusted("https://files.slack.com.evil.example/a.png")
        assert not files.trusted("http://127.0.0.1:9999/a.png")
    finally:
        await files.close()
