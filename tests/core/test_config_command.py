"""`/config` end to end: each key changes what the model receives or whether tools are offered,
channel beats team beats default, admins only, all-or-nothing validation, history, forget, and
a change through one replica applies in the other at its next turn. Oracles: FakeOpenAI's own
request log and the store read directly."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from bot.core import CommandReply, CommandRequest
from bot.keys import TeamKey
from bot.memory.prompts import SYSTEM_PROMPT
from bot.stores.place_settings import FORGOTTEN
from testkit.fakes.openai_server import FakeOpenAI, text
from tests.e2e.test_chat_cli import run_chat
from tests.helpers import say

TEAM = TeamKey("test", "T1")


async def config(
    app: Any, text_: str, *, user: str = "UADMIN", channel: str = "C1"
) -> CommandReply:
    reply: CommandReply = await app.handle_command(
        CommandRequest(
            "test", "T1", channel, user, "config", text_, is_platform_admin=user == "UADMIN"
        )
    )
    return reply


async def test_each_key_reaches_the_model_and_channel_beats_team(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(bot_models="big-model")
    assert (await config(app, 'set team language=de instructions="You are Acme support."')).ok
    assert (await config(app, "set model=big-model tools=none", channel="C1")).ok
    fake_openai.push(text("a"), text("b"))
    await say(app, "hello", channel="C1")
    here = fake_openai.requests[-1]
    system = here["messages"][0]["content"]
    assert "You are Acme support." in system and "language: de" in system
    assert here["model"] == "big-model"
    assert {t["function"]["name"] for t in here.get("tools") or []} == {"remember"}
    await say(app, "hello", channel="C2")  # the team's settings only
    there = fake_openai.requests[-1]
    assert there["model"] == app.settings.bot_model and "Acme" in there["messages"][0]["content"]

    shown = (await config(app, "show", channel="C1", user="UMEMBER")).text
    assert "*language*: `de` — team" in shown and "*model*: `big-model` — channel" in shown
    assert "*memory*: `on` — default" in shown and "*bots*: `ignore` — default" in shown

    assert (await config(app, "unset team language instructions")).ok
    fake_openai.push(text("c"))
    await say(app, "hello", channel="C2")
    assert fake_openai.requests[-1]["messages"][0]["content"] == SYSTEM_PROMPT


async def test_members_are_refused_and_bad_values_change_nothing(make_app: Any) -> None:
    app = await make_app()
    refused = await config(app, "set language=de", user="UMEMBER")
    assert not refused.ok and "only admins" in refused.text
    bad = await config(app, "set memory=off language=klingon! colour=blue tools=orders")
    assert not bad.ok and "Nothing was changed" in bad.text
    assert "language tag" in bad.text and "unknown setting" in bad.text
    assert "not installed: orders" in bad.text
    assert await app.place_settings.store.place_values(TEAM, "C1") == ({}, {})
    unclosed = await config(app, 'set instructions="never closed')
    assert not unclosed.ok and "unclosed quote" in unclosed.text
    assert not (await config(app, "frobnicate")).ok
    approve = await config(app, "set approve=sometimes")
    assert not approve.ok and "approve: one of writes, all, none" in approve.text
    risk = await config(app, "set tool_risk=crm_close=maybe")
    assert not risk.ok and "TOOL=read or TOOL=write" in risk.text
    budget = await config(app, "set budget=$5/year")
    assert not budget.ok and "day, week or month" in budget.text


async def test_history_lists_changes_here_and_forget_takes_the_author_out(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    await config(app, "set language=de")
    await config(app, "set team memory=off")
    await config(app, "set language=fr", channel="C2")
    listed = (await config(app, "history", user="UMEMBER")).text
    lines = [line for line in listed.splitlines() if line.startswith("•")]
    assert len(lines) == 2 and "*memory*" in lines[0] and "(team)" in lines[0]
    assert "*language*: _(none)_ → `de`" in lines[1] and "UADMIN" in lines[1]

    forgot = await app.handle_command(
        CommandRequest("test", "T1", "C1", "UADMIN", "memory", "forget all")
    )
    assert forgot.ok
    changes = await app.place_settings.store.history(TEAM, "C1", limit=5)
    assert {c.by for c in changes} == {FORGOTTEN}
    assert (await app.place_settings.store.place_values(TEAM, "C1"))[1] == {"language": "de"}


async def test_a_change_in_one_replica_applies_in_the_other_at_its_next_turn(
    make_app: Any, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    shared = {
        "bot_data_dir": str(tmp_path / "shared"),
        "redis_url": "redis://127.0.0.1:6379/0",
        "bot_redis_prefix": f"t{uuid.uuid4().hex[:8]}:",
    }
    one = await make_app(**shared)
    two = await make_app(**shared)
    fake_openai.push(text("a"), text("b"))
    await say(two, "hello", channel="C1")  # two has read (and cached) the defaults
    assert fake_openai.requests[-1]["messages"][0]["content"] == SYSTEM_PROMPT
    assert (await config(one, "set language=fr")).ok
    await say(two, "hello", channel="C1")
    assert "language: fr" in fake_openai.requests[-1]["messages"][0]["content"]


def test_bot_chat_runs_config(tmp_path: Path) -> None:
    fake = FakeOpenAI().start_in_thread()
    try:
        fake.push(text("Bonjour."))
        out = run_chat(
            ["/config set language=fr", "/config", "hello"],
            fake=fake,
            data_dir=tmp_path / "d",
            args=("--channel", "general"),
        )
        assert out.returncode == 0, out.stderr
        assert "Set `language` for this channel." in out.stdout
        assert "*language*: `fr` — channel" in out.stdout
        assert len(fake.requests) == 1  # the commands never reached the model
        assert "language: fr" in fake.requests[0]["messages"][0]["content"]
    finally:
        fake.stop()
