"""DESIGN's DM rule through the real discord.py client: a DM may use all of that person's facts on
Discord (every guild and the DM scope), a guild only its own; what a DM shows it can erase."""

from __future__ import annotations

import re
from typing import Any

from bot.app import BotApp
from bot.keys import PersonKey
from bot.memory.audit import audit
from bot.memory.audit_cli import run_audit
from testkit.fakes.discord_api import FakeDiscord
from testkit.fakes.openai_server import FakeOpenAI, message_text
from tests.discord.conftest import StartDiscord
from tests.discord.harness import DiscordHarness
from tests.discord.test_commands import answered

TEA, MISO, JAZZ, COFFEE = (
    "I like green tea-a1",
    "my cat is Miso-b2",
    "I love jazz-d3",
    "I drink coffee-b0b",
)
LOCKER = "my locker code is quasar-4242"


def first_channel(fake: FakeDiscord, guild: str) -> str:
    return next(c for c, v in fake.channels.items() if v.get("guild_id") == guild)


async def says(h: DiscordHarness, channel: str, user: str, text: str) -> None:
    """`user` says `text` (mentioning the bot outside DMs); returns once it is answered."""
    fake = h.fake
    before = len(fake.bot_messages(channel))
    dm = fake.channels[channel]["type"] == 1
    await fake.user_says(
        channel,
        user,
        text if dm else f"{h.mention()} {text}",
        mentions=[] if dm else [fake.app_id],
    )
    await fake.wait_for(lambda: len(fake.bot_messages(channel)) > before)
    await h.idle()


async def context_of(h: DiscordHarness, openai: FakeOpenAI, channel: str, user: str) -> str:
    """Everything the model was sent to answer one question of `user` in `channel`."""
    openai.reset()
    await says(h, channel, user, "what do you know about me?")
    sent = [message_text(m) for r in openai.requests for m in r["messages"]]
    assert any("what do you know about me?" in t for t in sent), "the turn reached the model"
    return "\n".join(sent)


async def command(fake: FakeDiscord, channel: str, user: str, sub: str, **options: Any) -> str:
    return await answered(fake, await fake.run_command(channel, user, "memory", sub, options))


class World:
    def __init__(self, fake: FakeDiscord) -> None:
        self.ada, self.bob = fake.add_user("Ada"), fake.add_user("Bob")
        self.guild_a, self.guild_b = fake.add_guild("Guild A"), fake.add_guild("Guild B")
        self.in_a = first_channel(fake, self.guild_a)
        self.in_b = first_channel(fake, self.guild_b)
        self.dm_ada, self.dm_bob = fake.dm_channel(self.ada), fake.dm_channel(self.bob)

    def ada_in(self, team: str) -> PersonKey:
        return PersonKey("discord", team, self.ada)


async def test_a_dm_uses_the_persons_facts_of_every_guild_and_a_guild_only_its_own(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    fake_openai: FakeOpenAI,
) -> None:
    w = World(fake_discord)
    h = await start_discord(await make_app())
    await says(h, w.in_a, w.ada, f"remember that {TEA}")
    await says(h, w.in_a, w.bob, f"remember that {COFFEE}")
    await says(h, w.dm_ada, w.ada, f"remember that {JAZZ}")

    in_dm = await context_of(h, fake_openai, w.dm_ada, w.ada)
    assert f"{TEA} (remembered in server {w.guild_a})" in in_dm
    assert f"- {JAZZ}\n" in in_dm  # remembered in this DM: no place named
    assert "coffee-b0b" not in in_dm  # Bob's, though he told it in the same channel

    bobs_dm = await context_of(h, fake_openai, w.dm_bob, w.bob)
    assert f"{COFFEE} (remembered in server {w.guild_a})" in bobs_dm
    assert "tea-a1" not in bobs_dm and "jazz-d3" not in bobs_dm

    in_b = await context_of(h, fake_openai, w.in_b, w.ada)
    assert "tea-a1" not in in_b and "jazz-d3" not in in_b and "coffee-b0b" not in in_b
    in_a = await context_of(h, fake_openai, w.in_a, w.ada)
    assert TEA in in_a and "jazz-d3" not in in_a and "coffee-b0b" not in in_a
    assert "remembered in" not in in_a  # a guild's own facts need no place


async def test_show_and_forget_in_a_dm_span_discord_and_in_a_guild_stay_there(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    fake_openai: FakeOpenAI,
) -> None:
    w = World(fake_discord)
    app: BotApp = await make_app(episodic=True)
    h = await start_discord(app)
    await says(h, w.in_a, w.ada, f"remember that {TEA}")
    await says(h, w.in_a, w.ada, LOCKER)  # a turn, indexed as a long-term memory
    await says(h, w.in_b, w.ada, f"remember that {MISO}")
    await says(h, w.dm_ada, w.ada, f"remember that {JAZZ}")
    await says(h, w.in_a, w.bob, f"remember that {COFFEE}")
    assert app.episodic is not None and await app.episodic.idle(timeout=15)

    shown = await command(fake_discord, w.dm_ada, w.ada, "show")
    assert "on Discord, in your DMs and every server:" in shown
    assert f"{TEA} (remembered in server {w.guild_a})" in shown
    assert f"{MISO} (remembered in server {w.guild_b})" in shown
    assert f"{JAZZ} —" in shown and "coffee-b0b" not in shown
    in_b = await command(fake_discord, w.in_b, w.ada, "show")
    assert "Miso-b2" in in_b and "tea-a1" not in in_b and "jazz-d3" not in in_b

    # One guild fact, forgotten from the DM that showed it.
    (miso_id,) = re.findall(r"`(\w+)` (?:\[\w+\] )?" + re.escape(MISO), shown)
    forgot = await command(fake_discord, w.dm_ada, w.ada, "forget", id=miso_id)
    assert forgot == f"Forgotten: fact `{miso_id}` (remembered in server {w.guild_b}) is erased."
    assert "Miso-b2" not in await command(fake_discord, w.in_b, w.ada, "show")
    assert "tea-a1" in await command(fake_discord, w.in_a, w.ada, "show")

    # Before: the audit finds Ada's guild words (so finding nothing later means something).
    assert await audit(phrase="quasar-4242", person=w.ada_in(w.guild_a), store=app.store)
    assert await app.episodic.index.entries_of_person(w.ada_in(w.guild_a))

    erased = await command(fake_discord, w.dm_ada, w.ada, "forget", id="all")
    assert erased.startswith("Done. I erased everything I held about you on Discord"), erased
    assert f"your DMs, server {w.guild_a}, server {w.guild_b}" in erased, erased
    assert "Receipt(s): `r" in erased
    for team in ("@dm", w.guild_a, w.guild_b):
        person = w.ada_in(team)
        assert await app.store.list_facts(person, history=True) == []
        assert await app.store.receipts(person), team  # a receipt per place that held something
        for phrase in ("tea-a1", "quasar-4242", "Miso-b2", "jazz-d3"):
            assert await run_audit(app.settings, person.id, phrase) == 0, (team, phrase)
    assert await app.episodic.index.entries_of_person(w.ada_in(w.guild_a)) == []
    assert "anything about you" in await command(fake_discord, w.dm_ada, w.ada, "show")
    # Bob's facts and words stay; in guild A he still sees his own.
    assert "coffee-b0b" in await command(fake_discord, w.in_a, w.bob, "show")
    assert await audit(phrase="coffee-b0b", store=app.store)


async def test_forget_all_in_a_guild_is_that_guilds_and_says_so(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    w = World(fake_discord)
    app: BotApp = await make_app()
    h = await start_discord(app)
    await says(h, w.in_a, w.ada, f"remember that {TEA}")
    await says(h, w.in_b, w.ada, f"remember that {MISO}")
    await says(h, w.dm_ada, w.ada, f"remember that {JAZZ}")
    erased = await command(fake_discord, w.in_a, w.ada, "forget", id="all")
    assert erased.startswith("Done. I erased everything I held about you in this server: 1 fact")
    assert "`/memory forget all` in a DM with me erases everything" in erased
    shown = await command(fake_discord, w.dm_ada, w.ada, "show")
    assert "tea-a1" not in shown and "Miso-b2" in shown and "jazz-d3" in shown
    # An id from another guild is not erased from here.
    (jazz_id,) = re.findall(r"`(\w+)` (?:\[\w+\] )?" + re.escape(JAZZ), shown)
    refused = await command(fake_discord, w.in_b, w.ada, "forget", id=jazz_id)
    assert refused.startswith(f"I have no fact `{jazz_id}` about you")
    assert "jazz-d3" in await command(fake_discord, w.dm_ada, w.ada, "show")
