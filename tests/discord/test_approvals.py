"""Approvals before actions on Discord, end to end: the real discord.py client and the real core
against FakeDiscord (gateway + REST, strict about interaction responses), FakeOpenAI, and a real
MCP server that records its calls. A read runs at once; a write waits behind a message that
pings the requester with Approve / Approve always / Deny; a stranger's click is refused
ephemerally; Approve runs the tool once (a double click and a replayed click too) and the turn
goes on in the place it was asked; Deny and expiry are told to the model, which answers; a
pending request survives a restart of the bot (new client, new core, same store) and the click
after it runs the tool once; approve=none and "always" behave."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.discord import approvals as discord_approvals
from bot.app import BotApp
from bot.core import CommandRequest
from testkit.fakes.discord_api import EPHEMERAL, FakeDiscord, Interaction
from testkit.fakes.mcp_server import FakeMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.discord.conftest import StartDiscord
from tests.discord.harness import DiscordHarness

CREATE = ("tix_create_ticket", {"title": "printer on fire", "priority": 1})
ASKED = "I'd like to run `tix_create_ticket`"
NOT_YOURS = "Only the person who asked can approve or deny this."


class Place:
    def __init__(self, fake: FakeDiscord) -> None:
        self.fake = fake
        self.ada = fake.add_user("Ada")
        self.bob = fake.add_user("Bob")
        self.guild = fake.add_guild("Guild A", owner=self.ada)
        self.channel = next(c for c, v in fake.channels.items() if v.get("guild_id") == self.guild)

    def bot_texts(self) -> list[str]:
        return [
            str(m["content"])
            for m in self.fake.messages.values()
            if m["author"]["id"] == self.fake.app_id and not m.get("deleted")
        ]

    def requests(self) -> list[dict[str, Any]]:
        """The bot's messages that carry approval buttons (now, or before a decision)."""
        return [
            m
            for m in self.fake.messages.values()
            if m["author"]["id"] == self.fake.app_id and ASKED in str(m["content"])
        ]

    async def admin(self, app: BotApp, command: str, words: str) -> str:
        reply = await app.handle_command(
            CommandRequest("discord", self.guild, self.channel, self.ada, command, words, True)
        )
        return reply.text

    async def say(self, h: DiscordHarness, words: str, expect: str) -> None:
        await self.fake.user_says(
            self.channel, self.ada, f"{h.mention()} {words}", mentions=[h.bot_id]
        )
        await self.fake.wait_for(lambda: any(expect in t for t in self.bot_texts()), timeout=20)
        await h.idle()

    async def wait_text(self, h: DiscordHarness, expect: str) -> None:
        await self.fake.wait_for(lambda: any(expect in t for t in self.bot_texts()), timeout=20)
        await h.idle()


def buttons(message: dict[str, Any]) -> dict[str, str]:
    return {b["label"]: b["custom_id"] for row in message["components"] for b in row["components"]}


async def acknowledged(fake: FakeDiscord, clicked: Interaction) -> dict[str, Any]:
    await fake.wait_for(lambda: clicked.response is not None, timeout=10)
    assert clicked.responded_at is not None
    assert clicked.responded_at - clicked.created < 3.0  # Discord's window
    return clicked.response or {}


def results(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in fake.requests[-1]["messages"] if m["role"] == "tool"]


async def started(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, mcp: FakeMcp, **over: Any
) -> tuple[Place, BotApp, DiscordHarness]:
    place = Place(fake_discord)
    app: BotApp = await make_app(**over)
    installed = await place.admin(app, "tools", f"install mcp name=tix url={mcp.url}")
    assert "tix" in installed
    return place, app, await start_discord(app)


async def test_read_at_once_write_waits_stranger_refused_approve_runs_once(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    async with FakeMcp() as mcp:
        place, _app, h = await started(fake_discord, start_discord, make_app, mcp)
        fake_openai.push(
            tool_calls([("tix_search_tickets", {"query": "printer"})]),
            text("One printer ticket is open."),
            tool_calls([CREATE]),
            text("Ticket T-101 is open."),
        )
        await place.say(h, "any printer tickets?", "One printer ticket is open.")
        assert mcp.calls == ["search_tickets"] and place.requests() == []  # read: no asking

        await place.say(h, "open a ticket: printer on fire", ASKED)
        (request,) = place.requests()
        assert mcp.created == []  # the write waits
        assert request["content"].startswith(f"<@{place.ada}> ")
        assert "title: printer on fire" in request["content"]
        pinged = request["allowed_mentions"]
        assert [str(u) for u in pinged["users"]] == [place.ada] and pinged["parse"] == []
        ids = buttons(request)
        assert list(ids) == ["Approve", "Approve always", "Deny"]

        stranger = await fake_discord.user_clicks(request["id"], place.bob, label="Approve")
        refused = await acknowledged(fake_discord, stranger)
        assert refused["type"] == 4 and refused["data"]["flags"] & EPHEMERAL
        assert refused["data"]["content"] == NOT_YOURS
        # Even a forged button naming Bob as the requester: the store's record decides.
        forged = ids["Approve"].rsplit(":", 1)[0] + f":{place.bob}"
        tricked = await fake_discord.user_clicks(request["id"], place.bob, custom_id=forged)
        assert (await acknowledged(fake_discord, tricked))["type"] == 6
        await fake_discord.wait_for(lambda: bool(tricked.followups), timeout=10)
        assert tricked.followups[0]["content"] == NOT_YOURS
        assert tricked.followups[0]["flags"] & EPHEMERAL

        # A double click: two interactions before the message changes; one decision wins.
        first = await fake_discord.user_clicks(request["id"], place.ada, custom_id=ids["Approve"])
        second = await fake_discord.user_clicks(request["id"], place.ada, custom_id=ids["Approve"])
        assert (await acknowledged(fake_discord, first))["type"] == 6
        assert (await acknowledged(fake_discord, second))["type"] == 6
        await place.wait_text(h, "Ticket T-101 is open.")
        await fake_discord.wait_for(lambda: bool(first.followups or second.followups), 10)
        assert [f["content"] for f in first.followups + second.followups] == [
            "That request was already decided."
        ]
        callbacks = f"/interactions/{first.id}/{first.token}/callback"

        def refused_again() -> bool:  # the replay's own acknowledgement, refused (40060)
            return any(c.path.endswith(callbacks) and c.status == 400 for c in fake_discord.calls)

        await fake_discord.replay_interaction(first)  # a replayed click: nothing more
        await fake_discord.wait_for(refused_again, timeout=10)
        await h.idle()
        assert mcp.created == [{"title": "printer on fire", "priority": 1}]  # once
        shown = fake_discord.messages[request["id"]]
        assert shown["components"] == [] and "Approved: running `tix_create_ticket`" in str(
            shown["content"]
        )
        assert results(fake_openai)[-1]["ok"] is True  # the model saw the real result
        audit = await place.admin(_app, "tools", "audit")
        asked = f"`tix_create_ticket` (priority: 1; title: printer on fire) asked by {place.ada}"
        assert f"{asked} in {place.channel}: approved by {place.ada}" in audit
        assert "ran: ok" in audit


async def test_deny_and_expiry_are_told_to_the_model(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(discord_approvals, "SWEEP_EVERY", 0.2)
    async with FakeMcp() as mcp:
        place, _app, h = await started(
            fake_discord, start_discord, make_app, mcp, bot_approval_ttl=2.0
        )
        fake_openai.push(tool_calls([CREATE]), text("OK, I did not open it."))
        await place.say(h, "open a ticket: printer on fire", ASKED)
        (request,) = place.requests()
        denied = await fake_discord.user_clicks(request["id"], place.ada, label="Deny")
        assert (await acknowledged(fake_discord, denied))["type"] == 6
        await place.wait_text(h, "OK, I did not open it.")
        assert results(fake_openai)[-1]["error"]["type"] == "declined_by_person"
        assert "Denied" in str(fake_discord.messages[request["id"]]["content"])

        # Nobody answers: the sweep in the Discord process expires it and the model answers.
        fake_openai.push(
            tool_calls([("tix_create_ticket", {"title": "toner low"})]),
            text("It expired, so nothing was opened."),
        )
        await place.say(h, "open a ticket: toner low", "title: toner low")
        await place.wait_text(h, "It expired, so nothing was opened.")
        assert results(fake_openai)[-1]["error"]["type"] == "approval_expired"
        assert mcp.created == []


async def test_a_pending_request_survives_a_restart(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    async with FakeMcp() as mcp:
        place, app, h = await started(fake_discord, start_discord, make_app, mcp)
        fake_openai.push(tool_calls([CREATE]), text("Opened after the restart."))
        await place.say(h, "open a ticket: printer on fire", ASKED)
        (request,) = place.requests()
        approve = buttons(request)["Approve"]
        await h.close()  # the bot process stops: client and core
        await app.close()
        again: BotApp = await make_app()  # a new process on the same store
        h2 = await start_discord(again)
        clicked = await fake_discord.user_clicks(request["id"], place.ada, label="Approve")
        assert (await acknowledged(fake_discord, clicked))["type"] == 6
        await place.wait_text(h2, "Opened after the restart.")
        assert mcp.created == [{"title": "printer on fire", "priority": 1}]
        late = await fake_discord.user_clicks(request["id"], place.ada, custom_id=approve)
        await fake_discord.wait_for(lambda: bool(late.followups), timeout=10)
        assert late.followups[0]["content"] == "That request was already decided."
        await h2.idle()
        assert len(mcp.created) == 1


async def test_approve_always_and_approve_none(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    async with FakeMcp() as mcp:
        place, app, h = await started(fake_discord, start_discord, make_app, mcp)
        fake_openai.push(
            tool_calls([CREATE]),
            text("Opened."),
            tool_calls([("tix_create_ticket", {"title": "toner low"})]),
            text("Opened again, no need to ask."),
        )
        await place.say(h, "open a ticket: printer on fire", ASKED)
        (request,) = place.requests()
        always = await fake_discord.user_clicks(request["id"], place.ada, label="Approve always")
        assert (await acknowledged(fake_discord, always))["type"] == 6
        await place.wait_text(h, "Opened.")
        assert "won't be asked again" in str(fake_discord.messages[request["id"]]["content"])
        await place.say(h, "open a ticket: toner low", "Opened again, no need to ask.")
        assert len(place.requests()) == 1
        assert [c["title"] for c in mcp.created] == ["printer on fire", "toner low"]

        await place.admin(app, "config", "revoke tix_create_ticket")
        await place.admin(app, "config", "set approve=none")
        fake_openai.push(tool_calls([("tix_create_ticket", {"title": "paper jam"})]), text("Done."))
        await place.say(h, "open a ticket: paper jam", "Done.")
        assert len(place.requests()) == 1  # approve=none: the write ran without asking
        assert [c["title"] for c in mcp.created][-1] == "paper jam"


def test_only_approval_buttons_parse() -> None:
    assert discord_approvals.parse("ap:a:abc:123") == ("approve", "abc", "123")
    assert discord_approvals.parse("ap:A:abc:123") == ("always", "abc", "123")
    assert discord_approvals.parse("ap:d:abc:123") == ("deny", "abc", "123")
    for hostile in ("ap:x:abc:123", "ap:a::123", "ap:a:abc:12a", "ap:a:abc", "ap:" + "a" * 200):
        assert discord_approvals.parse(hostile) is None, hostile


async def test_the_fake_refuses_an_update_for_a_command_as_discord_does(
    fake_discord: FakeDiscord,
) -> None:
    """Discord: DEFERRED_UPDATE_MESSAGE (6) and UPDATE_MESSAGE (7) are only valid for
    component-based interactions; an application command must answer with 4 or 5."""
    import time

    import aiohttp

    stray = Interaction(id="1", token="itoken-stray", created=time.monotonic(), payload={"type": 2})
    fake_discord.interactions[stray.token] = stray
    url = f"{fake_discord.api_url}/interactions/1/{stray.token}/callback"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json={"type": 6}) as refused:
            assert refused.status == 400
        assert stray.responded_at is None
        async with http.post(url, json={"type": 5, "data": {"flags": EPHEMERAL}}) as deferred:
            assert deferred.status == 200
        async with http.post(url, json={"type": 5}) as twice:
            assert twice.status == 400 and (await twice.json())["code"] == 40060


async def _bot_discord(
    fake: FakeDiscord, openai: FakeOpenAI, tmp_path: Path
) -> asyncio.subprocess.Process:
    """`bot discord` as a process of its own (the replica), on the test's data dir."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "BOT_", "MONGODB", "REDIS", "SLACK_", "DISCORD_"))
    }
    env.update(
        {
            "BOT_DATA_DIR": str(tmp_path / "data"),
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": openai.base_url,
            "BOT_MODEL": "gpt-4o-mini",
            "BOT_RATE_USER": "off",
            "BOT_RATE_TEAM": "off",
            "DISCORD_TOKEN": fake.token,
            "DISCORD_API_URL": fake.api_url,
            "DISCORD_GATEWAY_URL": fake.gateway_url,
            "BOT_HTTP_HOST": "127.0.0.1",
            "BOT_HTTP_PORT": "0",
            "BOT_LOG_LEVEL": "ERROR",
            "BOT_TOOL_HOSTS": "127.0.0.1",  # the local MCP server (Discord is multi-tenant)
        }
    )
    known = len(fake.identifies)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "discord",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    await fake.wait_for(lambda: len(fake.identifies) > known, timeout=60)
    return proc


async def test_a_pending_request_survives_kill_9_of_the_replica_that_asked(
    fake_discord: FakeDiscord, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    async with FakeMcp() as mcp:
        place = Place(fake_discord)
        fake_openai.push(tool_calls([CREATE]), text("Opened after the kill."))
        first = await _bot_discord(fake_discord, fake_openai, tmp_path)
        install = await fake_discord.run_command(
            place.channel,
            place.ada,
            "tools",
            "install",
            {"pack": "mcp", "settings": f"name=tix url={mcp.url}"},
        )
        await fake_discord.wait_for(
            lambda: bool(install.followups) or (install.response or {}).get("type") == 4, 60
        )
        said = install.followups[0] if install.followups else (install.response or {})["data"]
        assert "Installed" in str(said["content"]), said
        mention = f"<@{fake_discord.app_id}>"
        await fake_discord.user_says(
            place.channel,
            place.ada,
            f"{mention} open a ticket: printer on fire",
            mentions=[fake_discord.app_id],
        )
        await fake_discord.wait_for(lambda: bool(place.requests()), timeout=60)
        (request,) = place.requests()
        first.kill()  # kill -9 of the replica that asked
        await first.wait()
        second = await _bot_discord(fake_discord, fake_openai, tmp_path)
        try:
            clicked = await fake_discord.user_clicks(request["id"], place.ada, label="Approve")
            assert (await acknowledged(fake_discord, clicked))["type"] == 6
            await fake_discord.wait_for(
                lambda: any("Opened after the kill." in t for t in place.bot_texts()), timeout=60
            )
            assert mcp.created == [{"title": "printer on fire", "priority": 1}]
        finally:
            second.terminate()  # SIGTERM: a clean stop
            _, err = await asyncio.wait_for(second.communicate(), timeout=60)
        assert second.returncode == 0, err.decode()[-2000:]
        assert "Traceback" not in err.decode()
        assert len(mcp.created) == 1


async def test_two_writes_in_one_response_wait_for_both_decisions(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    async with FakeMcp() as mcp:
        place, _app, h = await started(fake_discord, start_discord, make_app, mcp)
        fake_openai.push(
            tool_calls([CREATE, ("tix_create_ticket", {"title": "toner low"})]),
            text("One opened, one not."),
        )
        await place.say(h, "open tickets: printer on fire, toner low", "title: toner low")
        first, second = place.requests()  # one message each, both pinging Ada
        assert "printer on fire" in first["content"] and "toner low" in second["content"]
        yes = await fake_discord.user_clicks(first["id"], place.ada, label="Approve")
        assert (await acknowledged(fake_discord, yes))["type"] == 6
        await fake_discord.wait_for(lambda: not fake_discord.messages[first["id"]]["components"])
        await h.idle()
        assert mcp.created == [] and len(fake_openai.requests) == 1  # waits for the other one
        no = await fake_discord.user_clicks(second["id"], place.ada, label="Deny")
        assert (await acknowledged(fake_discord, no))["type"] == 6
        await place.wait_text(h, "One opened, one not.")
        assert mcp.created == [{"title": "printer on fire", "priority": 1}]
        outcomes = [r.get("ok", False) for r in results(fake_openai)]
        assert outcomes == [True, False]


async def test_a_resumed_turn_waits_for_a_turn_slot_like_any_turn(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: FakeOpenAI
) -> None:
    """With one turn at a time (`max_concurrent_turns=1`), the turn an Approve resumes waits for
    the slot a running turn holds: not a way around the adapter's turn limit and load guard."""
    async with FakeMcp() as mcp:
        place = Place(fake_discord)
        app: BotApp = await make_app()
        assert "tix" in await place.admin(app, "tools", f"install mcp name=tix url={mcp.url}")
        h = await start_discord(app, max_concurrent_turns=1)
        fake_openai.push(tool_calls([CREATE]))
        await place.say(h, "open a ticket: printer on fire", ASKED)
        (request,) = place.requests()

        order: list[str] = []
        release, resumed = asyncio.Event(), asyncio.Event()

        async def brain(body: dict[str, Any]) -> Any:
            said = " ".join(str(m.get("content")) for m in body["messages"] if m["role"] == "user")
            if "slow question" in said:
                order.append("slow asked")
                await release.wait()
                order.append("slow answered")
                return text("Slow answer.")
            order.append("resumed")
            resumed.set()
            return text("Ticket T-101 is open.")

        fake_openai.brain = brain
        other = fake_discord.add_channel(place.guild, "other")  # another conversation
        await fake_discord.user_says(
            other, place.bob, f"{h.mention()} slow question", mentions=[h.bot_id]
        )
        await fake_discord.wait_for(lambda: order == ["slow asked"], timeout=10)  # holds the slot
        ids = buttons(request)
        clicked = await fake_discord.user_clicks(request["id"], place.ada, custom_id=ids["Approve"])
        assert (await acknowledged(fake_discord, clicked))["type"] == 6
        # The decision is shown (the buttons gone); its turn would be the next model request.
        await fake_discord.wait_for(
            lambda: fake_discord.messages[request["id"]]["components"] == [], timeout=10
        )
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(resumed.wait(), 1.0)  # no slot: it waits
        assert mcp.created == []
        release.set()
        await place.wait_text(h, "Ticket T-101 is open.")
        assert order == ["slow asked", "slow answered", "resumed"]
        assert mcp.created == [{"title": "printer on fire", "priority": 1}]
