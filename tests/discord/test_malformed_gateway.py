"""A malformed gateway frame costs that frame only: one log line, and the bot answers on.

Each frame goes from the fake gateway through the real discord.py client (zlib-stream, its
parsers); the oracle is the fake's own record of what the bot posted afterwards.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import pytest

from adapters.discord import gateway_guard
from testkit.fakes.discord_api import FakeDiscord, snowflake
from tests.discord.conftest import StartDiscord
from tests.discord.harness import DiscordHarness

DROPPED = "discord_gateway_event_dropped"


def _without(key: str) -> Callable[[dict[str, Any]], Any]:
    def change(m: dict[str, Any]) -> Any:
        m.pop(key)
        return m

    return change


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    def change(m: dict[str, Any]) -> Any:
        m[key] = value
        return m

    return change


def _attachment_without_proxy_url(m: dict[str, Any]) -> Any:
    m["attachments"] = [
        {"id": snowflake(), "filename": "a.txt", "size": 1, "url": "https://cdn.discordapp.com/x"}
    ]
    return m


BAD_MESSAGES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "no author": _without("author"),
    "no content": _without("content"),
    "no id": _without("id"),
    "id abc": _set("id", "abc"),
    "mentions a string": _set("mentions", "everyone"),
    "channel_id null": _set("channel_id", None),
    "attachment without proxy_url": _attachment_without_proxy_url,
    "d null": lambda m: None,
    "d a string": lambda m: "hello",
    "author a number": _set("author", 5),
}


async def _answered_after(h: DiscordHarness, channel: str, user: str, text: str) -> None:
    """A normal mention sent now is answered (the process and the connection are up)."""
    fake = h.fake
    before = len(fake.bot_messages(channel))
    await fake.user_says(channel, user, f"{h.mention()} {text}", mentions=[fake.app_id])
    await fake.wait_for(lambda: len(fake.bot_messages(channel)) > before, timeout=20)
    assert not h.task.done()
    assert fake.bot_messages(channel)[-1]["content"] == f"ok: {text}"


def _dropped(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == DROPPED]


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.fixture
async def bot(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> tuple[DiscordHarness, str, str]:
    user = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    channel = next(c for c, v in fake_discord.channels.items() if v.get("guild_id") == guild)
    return await start_discord(await make_app()), channel, user


async def test_each_malformed_message_is_dropped_with_one_line_and_the_bot_answers_on(
    bot: tuple[DiscordHarness, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    h, channel, user = bot
    caplog.set_level(logging.INFO)
    # A well-formed message (not addressed to the bot, so ignored) to derive the broken ones.
    template = await h.fake.user_says(channel, user, "just chatting")
    payload = {k: v for k, v in template.items() if k != "injected"}
    for number, (name, change) in enumerate(BAD_MESSAGES.items(), start=1):
        bad = change(copy.deepcopy(payload) | {"content": f"<@{h.fake.app_id}> bad {number}"})
        if isinstance(bad, dict) and "mentions" in bad and name != "mentions a string":
            bad["mentions"] = [h.fake.bot]  # addressed to the bot: it would be answered if read
        await h.fake.dispatch_raw("MESSAGE_CREATE", bad)
        await _answered_after(h, channel, user, f"still here after {name}")
        assert len(_dropped(caplog)) == number, name
    await h.idle()
    assert not _tracebacks(caplog)
    posted = [m["content"] for m in h.fake.bot_messages(channel)]
    assert not [p for p in posted if "bad" in p]  # nothing of a dropped frame was answered
    for record in _dropped(caplog):
        fields = record.fields  # type: ignore[attr-defined]
        assert fields["event"] == "MESSAGE_CREATE" and fields["reason"].startswith("parse_error")
        assert "bad" not in str(fields)  # the frame's text is never logged


async def test_an_interaction_whose_member_has_no_user_is_dropped(
    bot: tuple[DiscordHarness, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    h, channel, user = bot
    caplog.set_level(logging.INFO)
    guild = h.fake.channels[channel]["guild_id"]
    [memory] = [c for c in h.fake.commands[None] if c["name"] == "memory"]
    member = {"roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "permissions": "0"}
    payload = {
        "id": snowflake(),
        "application_id": h.fake.app_id,
        "type": 2,
        "token": "itoken-x",
        "version": 1,
        "channel_id": channel,
        "guild_id": guild,
        "member": member,  # no "user"
        "data": {
            "id": memory["id"],
            "name": "memory",
            "type": 1,
            "options": [{"name": "show", "type": 1, "options": []}],
        },
        "locale": "en-US",
        "app_permissions": "0",
        "entitlements": [],
    }
    await h.fake.dispatch_raw("INTERACTION_CREATE", payload)
    await _answered_after(h, channel, user, "after the broken command")
    [record] = _dropped(caplog)
    assert record.fields["event"] == "INTERACTION_CREATE"  # type: ignore[attr-defined]
    await h.idle()
    assert not _tracebacks(caplog)


@pytest.mark.parametrize(
    ("name", "d_text"),
    [
        ("nested 5,000 deep", "[" * 5000 + "]" * 5000),
        ("nested 100,000 deep in an object", '{"a":' * 100_000 + "1" + "}" * 100_000),
        ("not JSON", "{nope"),
    ],
)
async def test_a_frame_nested_thousands_deep_or_not_json_is_dropped_before_parsing(
    bot: tuple[DiscordHarness, str, str],
    caplog: pytest.LogCaptureFixture,
    name: str,
    d_text: str,
) -> None:
    h, channel, user = bot
    caplog.set_level(logging.INFO)
    await h.fake.dispatch_raw("MESSAGE_CREATE", d_text=d_text)
    await _answered_after(h, channel, user, f"after {name}")
    [record] = _dropped(caplog)
    assert record.fields["reason"] in ("too_deep", "parse_error:JSONDecodeError")  # type: ignore[attr-defined]
    await h.idle()
    assert not _tracebacks(caplog)


async def test_a_frame_that_is_not_an_object_is_dropped(
    bot: tuple[DiscordHarness, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    h, channel, user = bot
    caplog.set_level(logging.INFO)
    for session in list(h.fake.sessions.values()):
        await h.fake.send_text(session, "[1, 2, 3]")
        await h.fake.send_text(session, '"just a string"')
    await _answered_after(h, channel, user, "after the odd frames")
    assert len(_dropped(caplog)) == 2
    await h.idle()
    assert not _tracebacks(caplog)


async def test_a_frame_over_the_size_bound_is_dropped_and_the_stream_still_decodes(
    bot: tuple[DiscordHarness, str, str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over the bound the frame is inflated to nothing, but the zlib stream's shared window
    stays whole: the frames after it (compressed against it) still decode."""
    h, channel, user = bot
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(gateway_guard, "MAX_FRAME_BYTES", 256 * 1024)
    ws = h.runtime.client.ws
    assert isinstance(ws._decompressor, gateway_guard.BoundedZlib)
    ws._decompressor.max_bytes = 256 * 1024
    big = {"content": "x" * (2 * 1024 * 1024), "id": snowflake()}
    await h.fake.dispatch_raw("MESSAGE_CREATE", big)
    await _answered_after(h, channel, user, "after the big frame")
    [record] = _dropped(caplog)
    assert record.fields["reason"] == "too_large"  # type: ignore[attr-defined]
    await h.idle()


@pytest.mark.parametrize(
    ("text", "deep"),
    [
        ("[" * 64 + "]" * 64, False),  # at the bound
        ("[" * 65 + "]" * 65, True),
        ("[[]" * 70 + "]" * 70, True),  # deep without a long run of openings
        ('["' + "[" * 500 + '", {"a": "' + "{" * 500 + '"}]', False),  # brackets in strings
        ('["\\"' + "[" * 500 + '"]', False),  # an escaped quote does not end the string
        ("[]" * 40 + "[" * 30, False),  # unbalanced: json.loads refuses it, building nothing
    ],
)
def test_depth_is_measured_outside_strings(text: str, deep: bool) -> None:
    assert gateway_guard.too_deep(text, 64) is deep
