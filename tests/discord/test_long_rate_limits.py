"""A 429 longer than discord.py's cap (`max_ratelimit_timeout`) raises `discord.RateLimited`,
which is not an `HTTPException`: each place a turn calls Discord handles it, so the person still
gets an answer (or the apology), and the process goes on. Through the real client and the
fake's REST, which answers the 429 as Discord does."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from adapters.discord.handlers import APOLOGY
from adapters.discord.sink import CUT_NOTE
from testkit.fakes.discord_api import FakeDiscord
from tests.discord.conftest import StartDiscord
from tests.discord.harness import DiscordHarness
from tests.slack.echo_core import EchoCore

LONG = 120.0  # seconds: past the 60 s cap, so discord.py raises instead of waiting


def first_channel(fake: FakeDiscord, guild: str) -> str:
    return next(c for c, v in fake.channels.items() if v.get("guild_id") == guild)


async def _mention(h: DiscordHarness, channel: str, user: str, text: str) -> dict[str, Any]:
    """Mention the bot and wait until it posted something in `channel` and went idle."""
    before = len(h.fake.bot_messages(channel))
    said = await h.fake.user_says(channel, user, f"{h.mention()} {text}", mentions=[h.bot_id])
    await h.fake.wait_for(lambda: len(h.fake.bot_messages(channel)) > before, timeout=20)
    await h.idle()
    return said


@pytest.fixture
def place(fake_discord: FakeDiscord) -> tuple[str, str]:
    user = fake_discord.add_user("Ada")
    return first_channel(fake_discord, fake_discord.add_guild("Guild A")), user


@pytest.mark.parametrize("global_", [False, True])
async def test_a_rate_limited_thread_is_answered_in_place(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    place: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
    global_: bool,
) -> None:
    channel, user = place
    caplog.set_level(logging.INFO)
    h = await start_discord(await make_app(), thread_everywhere=True)
    fake_discord.fail_next("POST", r"/messages/\d+/threads$", retry_after=LONG, global_=global_)
    asked = await _mention(h, channel, user, "hello")
    await h.idle()
    [reply] = fake_discord.bot_messages(channel)
    assert reply["content"] == "ok: hello"
    assert str(reply["message_reference"]["message_id"]) == asked["id"]
    [line] = [r for r in caplog.records if r.getMessage() == "discord_thread_failed"]
    assert line.fields == {"status": 429, "retry_after": LONG}  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_rate_limited_typing_indicator_does_not_cost_the_answer(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, place: tuple[str, str]
) -> None:
    channel, user = place
    h = await start_discord(await make_app())
    fake_discord.fail_next("POST", r"/typing$", retry_after=LONG)
    await _mention(h, channel, user, "hello")
    await h.idle()
    assert [m["content"] for m in fake_discord.bot_messages(channel)] == ["ok: hello"]
    assert fake_discord.calls_to("POST", r"/typing$")[0].status == 429


class _Forgetful(dict[int, Any]):
    """A `recent` cache that keeps nothing: the worker must fetch the message again over REST,
    as one in another process does."""

    def __setitem__(self, key: int, value: Any) -> None:
        return None


async def test_a_rate_limited_fetch_of_the_message_gets_the_apology(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, place: tuple[str, str]
) -> None:
    channel, user = place
    h = await start_discord(await make_app())
    h.runtime.handlers.recent = _Forgetful()  # type: ignore[assignment]
    fake_discord.fail_next("GET", r"/channels/\d+/messages/\d+$", retry_after=LONG)
    asked = await _mention(h, channel, user, "hello")
    await h.idle()
    [reply] = fake_discord.bot_messages(channel)
    assert reply["content"] == APOLOGY
    assert str(reply["message_reference"]["message_id"]) == asked["id"]
    # The next one is read and answered.
    await _mention(h, channel, user, "again")
    assert fake_discord.bot_messages(channel)[-1]["content"] == "ok: again"


async def test_an_answer_cut_by_a_long_rate_limit_says_so_on_the_part_that_went_out(
    fake_discord: FakeDiscord, start_discord: StartDiscord, place: tuple[str, str]
) -> None:
    channel, user = place
    answer = " ".join(f"Sentence number {i} explains one more step." for i in range(120))
    h = await start_discord(
        EchoCore(reply=answer, chunks=1), first_edit_chars=1_000_000, first_edit_seconds=1_000.0
    )  # no streamed preview: the final parts are the only messages sent
    fake_discord.fail_next("POST", r"/channels/\d+/messages$", retry_after=LONG, skip=1)
    await _mention(h, channel, user, "explain")  # answered in three parts; the second fails
    [first] = fake_discord.bot_messages(channel)
    assert first["content"].startswith("Sentence number 0")
    assert first["content"].endswith(CUT_NOTE) and len(first["content"]) <= 2000
