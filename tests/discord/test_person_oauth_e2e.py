"""Per-person tool connections through Discord (the gateway and REST of the local fake, the
real core and its inbox) against the fake protected MCP server: two people in one channel each
get the link by DM, sign in, the callback on the Discord bot's HTTP server connects them, each
waiting question is answered in the channel (the "open my DM" reply edited into the answer),
and each call carries its own subject."""

from __future__ import annotations

import socket
from typing import Any

import httpx

from testkit.fakes.discord_api import FakeDiscord
from testkit.fakes.oauth_mcp import FakeOAuthMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.discord.conftest import StartDiscord
from tests.discord.test_commands import ADMINISTRATOR, answered
from tests.discord.test_conversation import ask, first_channel


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _said(fake: FakeDiscord, channel: str) -> list[str]:
    return [m["content"] for m in fake.bot_messages(channel)]


async def _browse(link: str, user: str) -> httpx.Response:
    async with httpx.AsyncClient(follow_redirects=False) as http:
        opened = await http.get(link)
        assert opened.status_code == 302, opened.text
        first = await http.get(opened.headers["location"])
        assert first.status_code == 302, first.text
        login = await http.get(first.headers["location"] + f"&user={user}")
        assert login.status_code == 302
        return await http.get(login.headers["location"])


def _link(message: str) -> str:
    return next(w for w in message.split() if w.startswith("http"))


async def test_two_people_connect_through_discord(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    make_app: Any,
    fake_openai: FakeOpenAI,
) -> None:
    ada = fake_discord.add_user("Ada")
    bob = fake_discord.add_user("Bob")
    general = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    port = _free_port()
    core = await make_app(
        bot_public_url=f"http://127.0.0.1:{port}", bot_secret_key="a passphrase for tests"
    )
    h = await start_discord(core, http_port=port)
    async with FakeOAuthMcp() as fake:
        interaction = await fake_discord.run_command(
            general,
            ada,
            "tools",
            "install",
            {"pack": "mcp", "settings": f"name=tickets url={fake.url} auth=user"},
            permissions=ADMINISTRATOR,
        )
        assert "as `tickets`" in await answered(fake_discord, interaction)

        for n, person in enumerate((ada, bob), start=1):
            fake_openai.push(tool_calls([("tickets_connect", {})]), text("Open my DM."))
            await ask(h, general, person, f"my tickets? ({n})")
            dm = fake_discord.dm_channel(person)
            await fake_discord.wait_for(lambda dm=dm: bool(_said(fake_discord, dm)), timeout=20)
        links = [_link(_said(fake_discord, fake_discord.dm_channel(p))[0]) for p in (ada, bob)]
        assert links[0] != links[1]

        fake_openai.push(tool_calls([("tickets_whoami", {})]), text("You are ada."))
        page = await _browse(links[0], "ada")
        assert page.status_code == 200 and "Connected" in page.text
        # Discord: the reply to that message is the one answer, edited (the adapter's own
        # rule for a message answered again), from "open my DM" to the answer
        await fake_discord.wait_for(
            lambda: _said(fake_discord, general)[0] == "You are ada.", timeout=20
        )
        fake_openai.push(tool_calls([("tickets_whoami", {})]), text("You are bob."))
        page = await _browse(links[1], "bob")
        assert page.status_code == 200
        await fake_discord.wait_for(
            lambda: _said(fake_discord, general)[1] == "You are bob.", timeout=20
        )
        await h.idle()
        assert fake.calls == [("ada", "whoami"), ("bob", "whoami")]
        assert _said(fake_discord, general) == ["You are ada.", "You are bob."]
