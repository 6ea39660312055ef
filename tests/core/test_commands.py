"""`/memory` and `/tools` through the core, with a real SQLite store."""

from __future__ import annotations

import json
from typing import Any

from bot.core import CommandRequest
from bot.keys import PersonKey, TeamKey
from testkit.fakes.openai_server import FakeOpenAI
from tests.helpers import say
from tools.types import ToolContext


def cmd(
    command: str, text: str, *, user: str = "U1", team: str = "T1", admin: bool = False
) -> CommandRequest:
    return CommandRequest("test", team, "C1", user, command, text, is_platform_admin=admin)


async def test_memory_show_and_forget_one(make_app: Any) -> None:
    app = await make_app()
    await say(app, "please remember that I like green tea")
    await say(app, "please remember that I work nights")
    shown = await app.handle_command(cmd("memory", ""))
    assert "I like green tea" in shown.text and "I work nights" in shown.text
    facts = await app.store.list_facts(PersonKey("test", "T1", "U1"))
    gone = await app.handle_command(cmd("memory", f"forget {facts[0].id}"))
    assert gone.ok and facts[0].id in gone.text
    again = await app.handle_command(cmd("memory", "show"))
    assert "green tea" not in again.text and "I work nights" in again.text
    missing = await app.handle_command(cmd("memory", "forget nope42"))
    assert not missing.ok
    other = await app.handle_command(cmd("memory", "show", user="U2"))
    assert "work nights" not in other.text


async def test_forget_all_erases_turns_but_not_other_peoples(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app()
    await say(app, "please remember that I am vegan", user="U1")
    await say(app, "my locker code is 1234", user="U1")
    await say(app, "bob was here", user="U2")
    reply = await app.handle_command(cmd("memory", "Forget ALL", user="U1"))  # as phones type
    assert reply.ok and "1 fact(s)" in reply.text
    assert "6 message(s)" in reply.text  # user+reply twice, plus the remember call and result
    fake_openai.requests.clear()
    await say(app, "what do you know?", user="U2")
    seen = json.dumps(fake_openai.requests)
    assert "1234" not in seen and "vegan" not in seen and "bob was here" in seen


async def test_tools_admin_only_and_secrets_never_shown(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app = await make_app(bot_admins="UADMIN")
    listed = await app.handle_command(cmd("tools", ""))
    assert "orders" in listed.text and "weather" in listed.text
    refused = await app.handle_command(cmd("tools", "install weather", user="U9"))
    assert not refused.ok and "admin" in refused.text
    bad = await app.handle_command(cmd("tools", "install orders url=ftp://x", user="UADMIN"))
    assert not bad.ok
    ok = await app.handle_command(
        cmd("tools", "install orders url=http://127.0.0.1:9/ token=s3cr3t-value", admin=True)
    )
    assert ok.ok and "s3cr3t-value" not in ok.text
    listed = await app.handle_command(cmd("tools", "list"))
    assert "orders" in listed.text and "s3cr3t-value" not in listed.text
    # Offered to the model in this team only.
    await say(app, "hello", team="T1")
    assert "get_order_status" in json.dumps(fake_openai.requests[-1]["tools"])
    await say(app, "hello", team="T2")
    assert "get_order_status" not in json.dumps(fake_openai.requests[-1]["tools"])
    removed = await app.handle_command(cmd("tools", "remove orders", user="UADMIN"))
    assert removed.ok
    await say(app, "hello", team="T1")
    assert "get_order_status" not in json.dumps(fake_openai.requests[-1]["tools"])
    unknown = await app.handle_command(cmd("tools", "install rockets", admin=True))
    assert not unknown.ok and "rockets" in unknown.text


async def test_remember_again_after_forget_all_stores_again(make_app: Any) -> None:
    app = await make_app()
    await say(app, "please remember that I like green tea")
    await app.handle_command(cmd("memory", "forget all"))
    await say(app, "please remember that I like green tea")
    shown = await app.handle_command(cmd("memory", "show"))
    assert "I like green tea" in shown.text


async def test_remember_of_only_punctuation_is_a_business_error(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    from testkit.fakes.openai_server import text, tool_calls

    app = await make_app()
    fake_openai.push(tool_calls([("remember", {"fact": "..."})]), text("ok"))
    await say(app, "remember this")
    result = json.loads(
        next(m for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool")["content"]
    )
    assert result["error"]["type"] == "business_error"


async def test_tools_install_refuses_a_setting_given_twice(make_app: Any) -> None:
    """The command parses settings with the packs' one parser, duplicate-key check included:
    `url=A url=B` is refused instead of silently installing B."""
    app = await make_app()
    reply = await app.handle_command(
        cmd("tools", "install orders url=http://127.0.0.1:9/ url=http://127.0.0.1:8/", admin=True)
    )
    assert not reply.ok and "url is given twice" in reply.text
    assert await app.store.installed(TeamKey("test", "T1")) == []
    bare = await app.handle_command(cmd("tools", "install orders s3cr3t", admin=True))
    assert not bare.ok and "not in key=value form" in bare.text and "s3cr3t" not in bare.text


async def test_remember_needs_only_the_typed_tool_context(make_app: Any) -> None:
    """`remember` files the fact from ToolContext's typed fields (speaker and session ids)."""
    from bot.memory.remember import remember
    from bot.stores.records import Fact

    app = await make_app()
    tool = remember.bind(reconciler=app.reconciler)
    ctx = ToolContext(
        session_id="test:T1:C1:-", speaker_id="test:T1:U7", team_id="test:T1", turn_id="t-1"
    )
    out = await tool.invoke(tool.args_model(fact="Likes rooibos."), ctx)
    assert out["stored"] is True
    facts: list[Fact] = await app.store.list_facts(PersonKey("test", "T1", "U7"))
    assert [f.text for f in facts] == ["Likes rooibos."]
    assert facts[0].source_ref == "t-1"
