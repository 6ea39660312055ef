"""The sign-in in chat, through the whole bot (BotApp on the fake model server, its durable
inbox, the real callback route on aiohttp) against the fake protected MCP server: a person
whose turn needs an unconnected `auth=user` server gets a private link; the callback connects
them; the question waiting in the inbox is answered again with their own tools; two people in
one channel each call with their own subject; a replayed callback is refused."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web

from adapters.common.oauth_callback import add_oauth_callback
from bot.app import BotApp
from bot.core import CommandRequest
from bot.inbox import Delivery
from bot.keys import PersonKey
from bot.stores.inbox import InboxItem
from testkit.fakes.oauth_mcp import FakeOAuthMcp
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from testkit.sinks import CollectingSink
from tests.helpers import message, until

KIND = "test.message"
SECRET = "a passphrase for the tests only"


@dataclass
class Notices:
    sent: list[tuple[str, str]] = field(default_factory=list)

    async def tell(self, person: PersonKey, text: str) -> None:
        self.sent.append((person.id, text))


@dataclass
class Chat:
    app: BotApp
    fake: FakeOAuthMcp
    model: FakeOpenAI
    notices: Notices
    public: str
    answers: list[tuple[str, str]] = field(default_factory=list)  # (user, final reply)

    async def handler(self, delivery: Delivery) -> None:
        body = delivery.body
        sink = CollectingSink()
        await self.app.handle_message(message(body["text"], user=body["user"]), sink)
        self.answers.append((body["user"], sink.final or ""))

    async def say(self, user: str, words: str, n: int) -> None:
        item = InboxItem(KIND, "test:T1:C1", {"text": words, "user": user}, dedup=(f"m{n}",))
        assert await self.app.enqueue(item)


@pytest.fixture
async def chat(make_app: Any, fake_openai: FakeOpenAI) -> AsyncIterator[Chat]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    public = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with FakeOAuthMcp(access_ttl=3600) as fake:
        app: BotApp = await make_app(bot_public_url=public, bot_secret_key=SECRET)
        notices = Notices()
        app.set_admin_notice(notices)
        world = Chat(app, fake, fake_openai, notices, public)
        app.serve_inbox(KIND, world.handler)
        web_app = web.Application()
        add_oauth_callback(web_app, app)
        runner = web.AppRunner(web_app)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        try:
            yield world
        finally:
            await runner.cleanup()


async def browse(link: str, user: str, issuer: str) -> tuple[str, httpx.Response]:
    """The person's browser: the link, the provider's login page, back to the bot's callback."""
    async with httpx.AsyncClient() as http:
        opened = await http.get(link)  # the bot's "Connect" link
        assert opened.status_code == 302, opened.text
        assert opened.headers["location"].startswith(f"{issuer}/authorize?")
        first = await http.get(opened.headers["location"])
        assert first.status_code == 302, first.text
        login = await http.get(first.headers["location"] + f"&user={user}")
        assert login.status_code == 302
        back = login.headers["location"]
        return back, await http.get(back)


def _link(text: str) -> str:
    return next(w for w in text.split() if w.startswith("http"))


def _offered(model: FakeOpenAI, n: int = -1) -> set[str]:
    return {t["function"]["name"] for t in model.requests[n].get("tools") or []}


async def _install(app: BotApp, url: str) -> None:
    reply = await app.handle_command(
        CommandRequest(
            "test",
            "T1",
            "C1",
            "UA",
            "tools",
            f"install mcp name=tickets url={url} auth=user",
            is_platform_admin=True,
        )
    )
    assert reply.ok, reply.text
    assert "each person connects it with their own account" in reply.text


async def test_two_people_connect_in_chat_and_each_call_carries_their_subject(
    chat: Chat,
) -> None:
    await _install(chat.app, chat.fake.url)
    # Alice asks; the model needs the server: the connect tool sends her a private link
    chat.model.push(tool_calls([("tickets_connect", {})]), text("Please use the link I sent."))
    await chat.say("UA", "what are my open tickets?", 1)
    await until(lambda: len(chat.answers) == 1, what="Alice's first answer")
    assert "tickets_connect" in _offered(chat.model)
    assert "tickets_whoami" not in _offered(chat.model)
    assert [p for p, _ in chat.notices.sent] == ["test:T1:UA"]
    link = _link(chat.notices.sent[0][1])
    assert link.startswith(chat.public + "/oauth/start?s=")
    tool_result = [m for m in chat.model.requests[-1]["messages"] if m["role"] == "tool"]
    assert "private message" in json.dumps(tool_result)

    # she signs in; her waiting question comes back through the inbox, now with her tools
    chat.model.push(tool_calls([("tickets_my_tickets", {})]), text("You have 2 open tickets."))
    back, page = await browse(link, "alice", chat.fake.issuer)
    assert page.status_code == 200 and "Connected" in page.text
    assert back.startswith(chat.public + "/oauth/callback?")
    await until(lambda: len(chat.answers) == 2, what="Alice's question answered again")
    assert chat.answers[1] == ("UA", "You have 2 open tickets.")
    assert chat.fake.calls == [("alice", "my_tickets")]

    # the same callback again: refused, nothing answered twice
    async with httpx.AsyncClient() as http:
        replay = await http.get(back)
        reopened = await http.get(link)  # the link itself works once too
    assert replay.status_code == 400 and "already used or has expired" in replay.text
    assert reopened.status_code == 400 and "already used or has expired" in reopened.text

    # Bob in the same channel: his own link, his own subject; Alice's connection untouched
    chat.model.push(tool_calls([("tickets_connect", {})]), text("Use the link."))
    await chat.say("UB", "and mine?", 2)
    await until(lambda: len(chat.answers) == 3, what="Bob's first answer")
    assert [p for p, _ in chat.notices.sent] == ["test:T1:UA", "test:T1:UB"]
    chat.model.push(tool_calls([("tickets_whoami", {})]), text("You are bob."))
    _back, page = await browse(_link(chat.notices.sent[1][1]), "bob", chat.fake.issuer)
    assert page.status_code == 200
    await until(lambda: len(chat.answers) == 4, what="Bob's question answered again")
    chat.model.push(tool_calls([("tickets_whoami", {})]), text("You are alice."))
    await chat.say("UA", "who am I there?", 3)
    await until(lambda: len(chat.answers) == 5, what="Alice's next answer")
    assert chat.fake.calls == [("alice", "my_tickets"), ("bob", "whoami"), ("alice", "whoami")]
    assert len(chat.notices.sent) == 2  # no new link for a connected person
    # no token or code ever reached the model (the links, with their state, only the people)
    sent_to_model = json.dumps(chat.model.requests)
    assert not [s for s in chat.fake.server.issued if s in sent_to_model]
    assert "state=" not in sent_to_model and "code_challenge" not in sent_to_model


async def test_without_public_url_one_clear_line(make_app: Any, fake_openai: FakeOpenAI) -> None:
    app: BotApp = await make_app(bot_secret_key=SECRET)
    async with FakeOAuthMcp() as fake:
        refused = await app.handle_command(
            CommandRequest(
                "test",
                "T1",
                "C1",
                "UA",
                "tools",
                f"install mcp name=tickets url={fake.url} auth=user",
                is_platform_admin=True,
            )
        )
        assert not refused.ok and "BOT_PUBLIC_URL" in refused.text
        assert fake.server.clients == {} and fake.calls == []


def _tools(user: str, words: str) -> CommandRequest:
    return CommandRequest("test", "T1", "C1", user, "tools", words)


async def _connect(chat: Chat, user: str, subject: str, n: int) -> None:
    sent = len(chat.notices.sent)
    answered = len(chat.answers)
    chat.model.push(tool_calls([("tickets_connect", {})]), text("Use the link."))
    await chat.say(user, f"question {n}", n)
    await until(lambda: len(chat.notices.sent) == sent + 1, what="a link")
    chat.model.push(text("ok"))
    _back, page = await browse(_link(chat.notices.sent[-1][1]), subject, chat.fake.issuer)
    assert page.status_code == 200
    await until(lambda: len(chat.answers) == answered + 2, what="the question answered again")


async def test_connections_disconnect_and_forget_all(chat: Chat) -> None:
    await _install(chat.app, chat.fake.url)
    none = await chat.app.handle_command(_tools("UA", "connections"))
    assert none.ok and "have not connected" in none.text
    await _connect(chat, "UA", "alice", 1)
    await _connect(chat, "UB", "bob", 2)
    listed = await chat.app.handle_command(_tools("UA", "connections"))
    assert listed.ok and "`tickets` (connected " in listed.text
    issued = chat.fake.server.issued
    assert not any(secret in listed.text for secret in issued)

    gone = await chat.app.handle_command(_tools("UA", "disconnect tickets"))
    assert gone.ok and "Disconnected `tickets`" in gone.text
    again = await chat.app.handle_command(_tools("UA", "disconnect tickets"))
    assert not again.ok
    # Alice is asked to connect again; Bob still calls with his own account
    chat.model.push(text("connect first"))
    await chat.say("UA", "my tickets?", 3)
    await until(lambda: len(chat.answers) == 5, what="Alice's answer")
    assert "tickets_connect" in _offered(chat.model)
    chat.model.push(tool_calls([("tickets_whoami", {})]), text("bob"))
    await chat.say("UB", "who am I?", 4)
    await until(lambda: len(chat.answers) == 6, what="Bob's answer")
    assert chat.fake.calls[-1] == ("bob", "whoami")

    forgot = await chat.app.handle_command(
        CommandRequest("test", "T1", "C1", "UB", "memory", "forget all")
    )
    assert forgot.ok
    bob = await chat.app.handle_command(_tools("UB", "connections"))
    assert "have not connected" in bob.text
    chat.model.push(text("connect first"))
    await chat.say("UB", "who am I now?", 5)
    await until(lambda: len(chat.answers) == 7, what="Bob's answer after forget")
    assert "tickets_connect" in _offered(chat.model)
    assert "tickets_whoami" not in _offered(chat.model)
