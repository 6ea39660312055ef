"""Unit tests of the adapter's pure parts: mrkdwn, splitting, normalisation, routing, config."""

from __future__ import annotations

from typing import Any

import pytest
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.config import SlackConfig, SlackConfigError
from adapters.slack.mrkdwn import escape, markdown_to_mrkdwn, split_message, truncate
from adapters.slack.normalize import mentioned_users, normalize_text
from adapters.slack.oauth import MemoryInstallationStorage, StorageInstallationStore
from adapters.slack.routing import route_event
from adapters.slack.threads import ThreadTracker

# -- markdown -> mrkdwn -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and __also__", "*bold* and *also*"),
        ("*italic* and _this_", "_italic_ and _this_"),
        ("~~gone~~", "~gone~"),
        ("# Title", "*Title*"),
        ("### **Already bold**", "*Already bold*"),
        ("- a\n* b\n  - c", "• a\n• b\n    ◦ c"),
        ("1. one\n2. two", "1. one\n2. two"),
        ("> quoted **x**", "> quoted *x*"),
        ("[site](https://a.b/c)", "<https://a.b/c|site>"),
        ("![cat](https://a.b/cat.png)", "<https://a.b/cat.png|cat>"),
        ("see https://a.b/c.", "see <https://a.b/c>."),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("`x < *y*`", "`x &lt; *y*`"),
        ("hi <@U123> and <#C1|gen> <!here>", "hi <@U123> and <#C1|gen> <!here>"),
        ("2 * 3 * 4", "2 * 3 * 4"),
        ("snake_case_name", "snake_case_name"),
        ("---", "──────────"),
        ("```py\nif a < b:\n    **x**\n```", "```\nif a &lt; b:\n    **x**\n```"),
        ("| a | b |\n|---|---|\n| 1 | 2 |", "```\n| a | b |\n| 1 | 2 |\n```"),
        ("```\nunclosed", "```\nunclosed\n```"),
    ],
)
def test_markdown_to_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert markdown_to_mrkdwn(markdown) == mrkdwn


def test_escape() -> None:
    assert escape("<a & b>") == "&lt;a &amp; b&gt;"


def test_split_keeps_parts_under_the_limit_and_fences_balanced() -> None:
    text = "intro\n\n```\n" + "line of code\n" * 800 + "```\n\nouttro " + "word " * 900
    parts = split_message(text, 3900)
    assert len(parts) > 2
    assert all(len(p) <= 3900 for p in parts)
    assert all(p.count("```") % 2 == 0 for p in parts)
    assert "".join(p.replace("```", "") for p in parts).count("line of code") == 800


def test_split_never_cuts_inside_a_slack_token() -> None:
    text = ("x" * 3880) + " <https://example.com/a-very-long-link|a label with spaces> tail"
    parts = split_message(text, 3900)
    assert all(p.count("<") == p.count(">") for p in parts)


def test_split_short_text_is_one_part() -> None:
    assert split_message("short", 3900) == ["short"]


def test_truncate_marks_and_closes_fences() -> None:
    out = truncate("```\n" + "a " * 3000, 500)
    assert len(out) <= 500 and out.endswith(" …") and out.count("```") == 2


# -- normalisation ----------------------------------------------------------------------------


def test_normalize_text() -> None:
    text = "<@UBOT>  hi <@U2|bob> <@U3> <#C1> <mailto:a@b.c|a@b.c> <https://x.y> <!subteam^S1>"
    out = normalize_text(text, bot_user_id="UBOT", names={"U3": "Carol"})
    assert out == "hi @bob @Carol #C1 a@b.c https://x.y @group"


def test_mentioned_users_in_order_without_duplicates() -> None:
    assert mentioned_users("<@U2> <@UBOT> <@U2|x> <@W9>") == ["U2", "UBOT", "W9"]


# -- routing ----------------------------------------------------------------------------------


def _route(event: dict[str, Any], **kw: Any) -> Any:
    return route_event(event, team="T1", bot_user_id="UBOT", bot_id="BBOT", **kw)


def test_route_mention_starts_a_thread_under_the_message() -> None:
    route = _route(
        {"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": "1.1", "channel": "C1"}
    )
    assert route.reply_thread_ts == "1.1" and route.session_thread == "1.1" and route.via_mention


def test_route_message_copy_of_a_mention_is_dropped() -> None:
    event = {
        "type": "message",
        "channel_type": "channel",
        "user": "U1",
        "text": "<@UBOT> hi",
        "ts": "1.1",
        "channel": "C1",
        "thread_ts": "1.0",
    }
    assert _route(event) is None


def test_route_thread_reply_needs_a_membership_check() -> None:
    event = {
        "type": "message",
        "channel_type": "channel",
        "user": "U1",
        "text": "more",
        "ts": "1.2",
        "channel": "C1",
        "thread_ts": "1.0",
    }
    route = _route(event)
    assert route.needs_thread_check and route.reply_thread_ts == "1.0"


def test_route_plain_channel_message_and_thread_root_are_ignored() -> None:
    base = {
        "type": "message",
        "channel_type": "channel",
        "user": "U1",
        "text": "x",
        "channel": "C1",
    }
    assert _route({**base, "ts": "1.0"}) is None
    assert _route({**base, "ts": "1.0", "thread_ts": "1.0"}) is None


def test_route_dm_top_level_and_in_thread() -> None:
    base = {"type": "message", "channel_type": "im", "user": "U1", "text": "x", "channel": "D1"}
    top = _route({**base, "ts": "2.0"})
    assert top.is_dm and top.reply_thread_ts is None and not top.assistant_thread
    threaded = _route({**base, "ts": "2.1", "thread_ts": "2.0"})
    assert threaded.assistant_thread and threaded.session_thread == "2.0"


def test_route_ignores_self_bots_edits_and_dm_mentions() -> None:
    dm = {"type": "message", "channel_type": "im", "channel": "D1", "ts": "3.0", "text": "x"}
    assert _route({**dm, "user": "UBOT"}) is None
    assert _route({**dm, "bot_id": "BBOT", "user": "U9"}) is None
    assert _route({**dm, "bot_id": "BX", "subtype": "bot_message"}) is None
    assert _route({**dm, "bot_id": "BX", "subtype": "bot_message"}, allow_bots=True) is not None
    assert _route({**dm, "user": "U1", "subtype": "message_changed"}) is None
    assert _route({**dm, "user": "U1", "subtype": "channel_join"}) is None
    assert _route({**dm, "user": "U1", "subtype": "file_share"}) is not None
    mention_in_dm = {
        "type": "app_mention",
        "user": "U1",
        "text": "<@UBOT>",
        "ts": "3.1",
        "channel": "D1",
    }
    assert _route(mention_in_dm) is None


# -- config -----------------------------------------------------------------------------------


def test_config_validation_names_the_variable() -> None:
    with pytest.raises(SlackConfigError, match="SLACK_SIGNING_SECRET"):
        SlackConfig(bot_token="xoxb-1").validate()
    with pytest.raises(SlackConfigError, match="SLACK_BOT_TOKEN"):
        SlackConfig(signing_secret="s").validate()
    with pytest.raises(SlackConfigError, match="SLACK_APP_TOKEN"):
        SlackConfig(bot_token="xoxb-1", app_token="nope").validate()
    with pytest.raises(SlackConfigError, match="SLACK_CLIENT_SECRET"):
        SlackConfig(signing_secret="s", client_id="1").validate()
    SlackConfig(bot_token="xoxb-1", app_token="xapp-1").validate()  # Socket Mode: no secret needed
    SlackConfig(signing_secret="s", client_id="1", client_secret="2").validate()


def test_config_from_settings_reads_attributes_and_secrets() -> None:
    class Secret:
        def __init__(self, value: str) -> None:
            self._value = value

        def get_secret_value(self) -> str:
            return self._value

    class Settings:
        slack_bot_token = Secret("xoxb-9")
        slack_signing_secret = "sig"
        slack_app_token = None
        slack_client_id = ""
        slack_client_secret = None
        slack_api_url = "http://localhost:9/api"
        bot_http_host = "127.0.0.1"
        bot_http_port = 8080

    config = SlackConfig.from_settings(Settings(), streaming=False)
    assert config.bot_token == "xoxb-9" and config.signing_secret == "sig"
    assert config.client_id is None and not config.oauth_enabled and not config.socket_mode
    assert config.base_url == "http://localhost:9/api/" and config.http_port == 8080
    assert config.streaming is False


# -- small helpers ----------------------------------------------------------------------------


async def test_thread_tracker_forgets_a_no_soon_and_a_yes_late() -> None:
    """A "no" (the bot is not in that thread) is cached briefly: it may be mentioned there next."""
    asked: list[str] = []
    now = [0.0]

    async def known_to_core() -> bool:
        asked.append("core")
        return False

    tracker = ThreadTracker(positive_ttl=3600.0, negative_ttl=30.0, clock=lambda: now[0])
    client = AsyncWebClient(token="xoxb-unused", base_url="http://127.0.0.1:9/")

    async def in_thread() -> bool:
        return await tracker.bot_in_thread(
            client,
            team="T1",
            channel="C1",
            thread_ts="1.0",
            bot_user_id="UB",
            bot_id=None,
            known_to_core=known_to_core,
        )

    assert not await in_thread() and not await in_thread()
    assert asked == ["core"]  # the "no" was cached
    now[0] = 31.0
    assert not await in_thread() and asked == ["core", "core"]  # ... but not for long
    tracker.mark("T1", "C1", "1.0")
    now[0] = 3000.0
    assert await in_thread() and asked == ["core", "core"]  # a "yes" lives long


async def test_installation_store_round_trip_keys_include_the_team() -> None:
    storage = MemoryInstallationStorage()
    store = StorageInstallationStore(storage)
    for team, user in (("T1", "U1"), ("T1", "U2"), ("T2", "U1")):
        await store.async_save(
            Installation(
                team_id=team,
                user_id=user,
                bot_token=f"xoxb-{team}-{user}",
                bot_id="B",
                bot_user_id="UB",
                bot_scopes="chat:write",
            )
        )
    bot = await store.async_find_bot(enterprise_id=None, team_id="T1")
    assert bot is not None and bot.bot_token == "xoxb-T1-U2" and bot.bot_scopes == ["chat:write"]
    older = await store.async_find_installation(enterprise_id=None, team_id="T1", user_id="U1")
    assert older is not None and older.bot_token == "xoxb-T1-U2"  # latest bot token wins
    await store.async_delete_installation(enterprise_id=None, team_id="T1", user_id="U2")
    assert ("-", "T1", "installer:U2") not in storage.docs
    assert ("-", "T1", "installer") not in storage.docs  # U2 was the latest installer
    assert ("-", "T1", "installer:U1") in storage.docs
    await store.async_delete_all(enterprise_id=None, team_id="T1")
    assert await store.async_find_bot(enterprise_id=None, team_id="T1") is None
    assert {k[1] for k in storage.docs} == {"T2"}


# -- admission control --------------------------------------------------------------------------


async def test_loop_guard_admits_at_once_when_idle_and_throttles_when_overloaded() -> None:
    import asyncio
    import time

    from adapters.common.loadguard import LoopGuard

    guard = LoopGuard(tick=0.01, max_lag=0.015, per_tick=5)
    await guard.admit()  # not started: never blocks
    guard.start()
    try:
        await asyncio.sleep(0.03)
        # A healthy loop admits a tick's budget without a wait (no wall-clock bound below 0.5 s:
        # on a loaded machine even an idle loop lags; the overload half below is the real test).
        await asyncio.wait_for(asyncio.gather(*(guard.admit() for _ in range(5))), timeout=2.0)

        time.sleep(0.06)  # noqa: ASYNC251 - a CPU-heavy stretch blocks the loop, on purpose
        for _ in range(3):
            await asyncio.sleep(0)  # the guard's timer, now overdue, fires and sees the lag
        assert guard.lag > 0.015
        waiting = [asyncio.create_task(guard.admit()) for _ in range(20)]
        await asyncio.sleep(0)
        assert guard.waiting >= 10  # most new turns wait for later ticks
        await asyncio.wait_for(asyncio.gather(*waiting), timeout=2.0)  # and all get in
        assert guard.waiting == 0
    finally:
        await guard.stop()


async def test_loop_guard_stops_ticking_when_no_turn_comes_and_starts_again_on_the_next() -> None:
    import asyncio

    from adapters.common.loadguard import LoopGuard

    guard = LoopGuard(tick=0.01, idle_after=0.05)
    guard.start()
    try:
        assert guard.ticking
        for _ in range(200):  # 2 s at most; it stops after about 5 ticks without an admission
            if not guard.ticking:
                break
            await asyncio.sleep(0.01)
        assert not guard.ticking
        await guard.admit()  # admitted at once, and the timer runs again
        assert guard.ticking
    finally:
        await guard.stop()
    assert not guard.ticking
    await guard.admit()  # stopped: never blocks, never ticks
    assert not guard.ticking


# -- manifest -----------------------------------------------------------------------------------


def test_manifest_matches_what_the_adapter_needs() -> None:
    import re
    from pathlib import Path

    from adapters.slack.commands import COMMANDS
    from adapters.slack.config import DEFAULT_SCOPES

    text = (Path(__file__).resolve().parents[2] / "manifest.yaml").read_text()

    def items(section: str) -> set[str]:
        block = text.split(f"{section}:\n", 1)[1]
        found = set()
        for line in block.splitlines():
            match = re.match(r"^\s+- ([a-z_.:]+)", line)
            if match is None:
                if line.strip() and not line.lstrip().startswith("-"):
                    break
                continue
            found.add(match.group(1))
        return found

    assert items("    bot") == set(DEFAULT_SCOPES)
    assert items("    bot_events") == {
        "app_mention",
        "message.channels",
        "message.groups",
        "message.im",
        "message.mpim",
        "assistant_thread_started",
        "assistant_thread_context_changed",
        "app_uninstalled",
        "tokens_revoked",
        "app_home_opened",
    }
    assert set(re.findall(r"- command: /(\w+)", text)) == set(COMMANDS)
