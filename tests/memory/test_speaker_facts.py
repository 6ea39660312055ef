"""Which facts a Slack DM uses: a Slack DM belongs to its workspace (its team is the workspace
id), so it sees that workspace's facts, as the workspace's channels do, and never those of
another workspace, even for the same user id (Enterprise Grid ids are org-wide)."""

from __future__ import annotations

from typing import Any

from bot.app import BotApp
from bot.keys import PersonKey
from bot.memory.speaker_facts import scope_name, spans_platform
from bot.messages import IncomingMessage
from testkit.fakes.openai_server import FakeOpenAI, message_text
from tests.helpers import CollectingSink


def slack(text: str, *, team: str, channel: str, dm: bool = False) -> IncomingMessage:
    return IncomingMessage("slack", team, channel, None, "W42", text, is_dm=dm, is_private=dm)


async def context(app: BotApp, openai: FakeOpenAI, msg: IncomingMessage) -> str:
    openai.reset()
    sink = CollectingSink()
    await app.handle_message(msg, sink)
    assert sink.final and not sink.error
    return "\n".join(message_text(m) for r in openai.requests for m in r["messages"])


async def test_a_slack_dm_sees_its_workspaces_facts_only(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    await context(app, fake_openai, slack("remember that I like tea-t1", team="T1", channel="C1"))
    await context(app, fake_openai, slack("remember that I like jazz-t2", team="T2", channel="C9"))
    in_dm = await context(app, fake_openai, slack("hi", team="T1", channel="D1", dm=True))
    assert "- I like tea-t1\n" in in_dm and "jazz-t2" not in in_dm
    assert "remembered in" not in in_dm


def test_only_a_dm_scope_spans_the_platform() -> None:
    assert spans_platform(PersonKey("discord", "@dm", "42"))
    assert not spans_platform(PersonKey("discord", "111", "42"))
    assert not spans_platform(PersonKey("slack", "T1", "U1"))
    assert scope_name("discord:111:42") == "server 111"
    assert scope_name("slack:T1:U1") == "workspace T1"
    assert scope_name("discord:@dm:42") == "your DMs"


def test_the_discord_adapter_uses_the_dm_scope() -> None:
    from adapters.discord.handlers import DM_TEAM
    from bot.memory.speaker_facts import DM_SCOPE

    assert DM_TEAM == DM_SCOPE
