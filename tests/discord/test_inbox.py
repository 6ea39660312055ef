"""Discord messages through the durable inbox: a message one process accepted and never ran is
answered by another (which fetches it again over REST), and a re-run edits what the first attempt
posted instead of posting again. Real discord.py clients, the fake Discord, two real cores on one
SQLite file playing two processes."""

from __future__ import annotations

from typing import Any

import aiohttp

from adapters.discord.handlers import INBOX_KIND
from adapters.discord.sink import part_nonce
from bot.app import BotApp
from testkit.fakes.discord_api import FakeDiscord
from testkit.fakes.openai_server import FakeOpenAI, text
from tests.discord.conftest import StartDiscord
from tests.discord.test_conversation import ask, first_channel
from tests.helpers import until


async def test_a_message_accepted_by_a_process_that_stopped_is_answered_by_another(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    first: BotApp = await make_app()
    h1 = await start_discord(first)
    await first.stop_inbox(0)  # it accepts messages, and never runs them (as if it died)
    said = await fake_discord.user_says(dm, ada, "anyone home?")
    assert first.inbox is not None
    await until(lambda: int(said["id"]) in h1.runtime.handlers.accepted, what="accepted")
    assert (await first.inbox.stats(INBOX_KIND)).depth == 1
    h1.runtime.handlers.accepted.clear()  # h1 will not run it: do not wait for it at close
    await h1.close()

    second: BotApp = await make_app()  # the same data dir: another process on the same store
    h2 = await start_discord(second)
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(dm)))
    await until(lambda: second.worker.in_flight == 0, what="the entry is done")
    assert [m["content"] for m in fake_discord.bot_messages(dm)] == ["ok: anyone home?"]
    assert fake_discord.calls_to("GET", rf"/channels/{dm}/messages/{said['id']}$")  # refetched
    assert (await second.inbox.stats(INBOX_KIND)).depth == 0
    await h2.idle()


async def test_a_taken_over_turn_edits_the_part_its_first_attempt_posted(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    fake_openai: FakeOpenAI,
) -> None:
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    app: BotApp = await make_app(bot_inbox_claim_seconds=0.5)
    h = await start_discord(app)
    await app.stop_inbox(0)
    asked = await ask(h, channel, ada, "what's new?")
    await until(lambda: int(asked["id"]) in h.runtime.handlers.accepted, what="accepted")
    assert app.inbox is not None
    # A worker of another process took it, posted a preview of the answer, and died.
    assert await app.inbox.take(INBOX_KIND, "elsewhere:1:dead", count=1, wait=2.0)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(
            f"{fake_discord.api_url}/channels/{channel}/messages",
            json={
                "content": "Not much, th …",
                "nonce": part_nonce(asked["id"], 0),
                "enforce_nonce": True,
                "message_reference": {"message_id": asked["id"], "channel_id": channel},
            },
            headers={"Authorization": f"Bot {fake_discord.token}"},
        )
        preview = await resp.json()
    assert resp.status == 200

    fake_openai.push(text("Not much, the usual."))
    h.runtime.handlers.accepted.clear()
    survivor: BotApp = await make_app(bot_inbox_claim_seconds=0.5)
    await start_discord(survivor)  # takes the entry over once it is idle for 0.5 s
    await fake_discord.wait_for(
        lambda: (
            [m["content"] for m in fake_discord.bot_messages(channel)] == ["Not much, the usual."]
        ),
        timeout=15,
    )
    [answer] = fake_discord.bot_messages(channel)
    assert answer["id"] == preview["id"]  # the same message, edited
    await until(lambda: survivor.worker.in_flight == 0, what="the entry is done")
