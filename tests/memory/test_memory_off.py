"""`memory=off` in a place: its messages are kept for the thread but never become long-term
memory (no index entries, nothing consolidated, never recalled elsewhere), whatever the setting
is later. Oracles: the index read directly, and the model server's own request log."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from bot.app import BotApp
from bot.keys import TeamKey
from bot.memory.consolidation import Consolidator
from bot.memory.reconcile import Reconciler
from bot.memory.structured import JsonAsker
from bot.messages import IncomingMessage
from bot.policy import PolicyResolver
from testkit.fakes.openai_server import FakeOpenAI, text
from tests.conftest import MakeApp
from tests.helpers import CollectingSink

WHEN = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SECRET = "the Lisbon supplier is Ferreira & Filhos"
KEPT = "the Porto supplier is Almeida Irmaos"
TEAM = TeamKey("slack", "T1")


class Places:
    """Settings in a dict: the `/config` store's stand-in."""

    def __init__(self, channel: dict[str, dict[str, str]]) -> None:
        self.channel = channel

    async def place_values(
        self, team: TeamKey, channel: str
    ) -> tuple[Mapping[str, str], Mapping[str, str]]:
        return {}, self.channel.get(channel, {})


def said(text: str, channel: str, user: str = "UALICE", *, dm: bool = False) -> IncomingMessage:
    return IncomingMessage(
        is_dm=dm,
        platform="slack",
        team="T1",
        channel=channel,
        thread=None if dm else "1.1",
        user=user,
        text=text,
        user_name=user.lower(),
        sent_at=WHEN,
    )


async def turn(app: BotApp, fake: FakeOpenAI, message: IncomingMessage) -> list[dict[str, Any]]:
    before = len(fake.requests)
    sink = CollectingSink()
    await app.handle_message(message, sink)
    assert sink.final and not sink.error
    assert app.episodic is not None and await app.episodic.idle(timeout=20)  # indexing done
    return list(fake.requests[before]["messages"])


async def _app(make_app: MakeApp, places: Places) -> BotApp:
    app = await make_app(episodic=True)
    app.policies = PolicyResolver(places, default_model=app.settings.bot_model)
    return app


async def test_nothing_said_where_memory_is_off_is_indexed_or_recalled(
    make_app: MakeApp, fake_openai: FakeOpenAI
) -> None:
    places = Places({"COFF": {"memory": "off"}})
    app = await _app(make_app, places)
    fake_openai.push(text("Noted."), text("Noted."))
    await turn(app, fake_openai, said(f"FYI {SECRET}", "COFF"))
    await turn(app, fake_openai, said(f"FYI {KEPT}", "CON"))

    assert app.episodic is not None
    entries = await app.episodic.index.entries_of_team(TEAM)
    sessions = {e.session for e in entries}
    assert any("CON" in s for s in sessions)  # the positive signal: indexing ran and wrote
    assert not any("COFF" in s for s in sessions)
    assert not any("Ferreira" in e.text for e in entries)

    # Memory back on there later: what was said while it was off stays out.
    places.channel.clear()
    fake_openai.push(text("Noted."))
    await turn(app, fake_openai, said("anything new?", "COFF"))
    entries = await app.episodic.index.entries_of_team(TEAM)
    assert any("COFF" in e.session for e in entries)  # the new turn is indexed
    assert not any("Ferreira" in e.text for e in entries)

    # Asked in her DM, where her channel memories are recalled: the kept detail is, the one
    # said where memory was off never; nor in a new thread of that channel.
    fake_openai.push(text("..."), text("..."), text("..."))
    sent = await turn(app, fake_openai, said("Who is the Porto supplier again?", "DA", dm=True))
    assert any("Almeida" in str(m.get("content")) for m in sent)
    sent = await turn(app, fake_openai, said("Who is the Lisbon supplier again?", "DA", dm=True))
    assert not any("Ferreira" in str(m.get("content")) for m in sent)
    again = said("Who is the Lisbon supplier again?", "COFF")
    sent = await turn(app, fake_openai, replace(again, thread="2.2"))
    assert not any("Ferreira" in str(m.get("content")) for m in sent)


async def test_the_thread_itself_still_keeps_its_conversation(
    make_app: MakeApp, fake_openai: FakeOpenAI
) -> None:
    app = await _app(make_app, Places({"COFF": {"memory": "off"}}))
    fake_openai.push(text("Noted."), text("Ferreira."))
    await turn(app, fake_openai, said(f"FYI {SECRET}", "COFF"))
    sent = await turn(app, fake_openai, said("who was it?", "COFF"))
    assert any("Ferreira" in str(m.get("content")) for m in sent)


async def test_the_nightly_consolidation_reads_past_memory_off_messages(
    make_app: MakeApp, fake_openai: FakeOpenAI
) -> None:
    app = await _app(make_app, Places({"COFF": {"memory": "off"}}))
    fake_openai.push(text("Noted."), text("Noted."))
    await turn(app, fake_openai, said(f"FYI {SECRET}", "COFF"))
    await turn(app, fake_openai, said(f"FYI {KEPT}", "CON"))
    before = len(fake_openai.requests)
    fake_openai.push(text(json.dumps({"facts": [], "memories": []})))
    asker = JsonAsker(app.summary_model)
    report = await Consolidator(app.store, Reconciler(app.store, asker), asker, holder="h1").run()
    assert report.ran and report.failures == 0
    asked = json.dumps(fake_openai.requests[before:])
    assert "Almeida" in asked  # the positive signal: the kept conversation was read
    assert "Ferreira" not in asked
