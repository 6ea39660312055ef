"""The App Home tab end to end: `app_home_opened` through the real Bolt app, `views.publish`
through slack_sdk to FakeSlack, which refuses any view the real Slack would (`check_view`).

Admins (Slack admins/owners, or `BOT_ADMINS`) see the team's settings, the overriding channels
and the last changes, rendered at open time from the cached settings (so the next open after a
`/config set` shows it); everyone else a short view without anyone's settings. "Nothing was
published" is asserted only after the adapter logged the event handled."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.home import MAX_BLOCKS, VIEW_BYTES, admin_view, channel_name, plain
from bot.app import BotApp
from bot.keys import TeamKey
from bot.settings_overview import ChannelOverride, SettingsOverview, TeamSetting
from bot.stores.place_settings import TEAM_WIDE, SettingChange
from bot.stores.protocols import StoreUnavailable
from bot.stores.sqlite_worker import transaction
from testkit.fakes.slack_api import FakeSlack, Identity, check_view
from testkit.slack_harness import SlackHarness
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore
from tests.slack.test_hostile import no_tracebacks

ADMIN = "UADMIN"  # FakeSlack's workspace admin


async def configure(slack: SlackHarness, text: str, channel: str = "C1") -> str:
    answer = await slack.ask("/config", text, user=ADMIN, channel=channel)
    return str(answer.get("text"))


async def open_home(slack: SlackHarness, user: str, **kw: Any) -> str:
    """Open the Home tab and wait until the adapter is done with it; its outcome."""
    event_id = await slack.open_home(user, **kw)
    [outcome] = await slack.wait_handled_ids([event_id], timeout=15)
    return outcome


def texts(view: dict[str, Any]) -> list[dict[str, Any]]:
    """Every text object of a view."""
    found: list[dict[str, Any]] = []
    for block in view["blocks"]:
        found += [block["text"]] if isinstance(block.get("text"), dict) else []
        found += block.get("elements") or []
    return found


# -- admins ---------------------------------------------------------------------------------


async def test_admin_sees_team_settings_overrides_and_changes(slack_real: SlackHarness) -> None:
    assert "Set `language`" in await configure(slack_real, "set team language=de")
    hostile = 'set team instructions="Be brief <!channel> & <@U2> *now*"'
    assert "Set `instructions`" in await configure(slack_real, hostile)
    assert "Set `reply`" in await configure(slack_real, "set reply=mention", channel="C7")
    assert "Set `memory`" in await configure(slack_real, "set memory=off bots=mentions", "C8")

    assert await open_home(slack_real, ADMIN) == "done"
    view = slack_real.fake.home_views[ADMIN]
    assert check_view(view) == [] and view["type"] == "home"
    text = slack_real.fake.home_text(ADMIN)
    assert "*language*: `de` — team" in text
    assert "*reply*: `threads` — default" in text
    assert "*memory*: `on` — default" in text
    # The admin's value is shown as typed, never as markup: no mention of anyone.
    assert "`Be brief &lt;!channel&gt; &amp; &lt;@U2&gt; *now*` — team" in text
    assert "<!channel>" not in text and "<@U2>" not in text
    assert all(t.get("verbatim") is True for t in texts(view) if t["type"] == "mrkdwn")
    # The overriding channels, with the keys they override and their values.
    assert "Channels with their own settings (2)" in text
    assert "<#C7>: *reply* `mention`" in text
    assert "<#C8>: *bots* `mentions` · *memory* `off`" in text
    # The team's own changes, newest first: who, when, key (no channel ones, no values).
    changes = text.split("Recent changes to the team's settings", 1)[1]
    assert changes.index("*instructions*") < changes.index("*language*")
    assert "<@UADMIN>" in changes and "*reply*" not in changes and "`de`" not in changes
    # Usage (`/usage`'s admin answer): the team's month, with the admin's own above it.
    assert "The team this month:" in text and "Your usage here:" in text
    assert slack_real.fake.calls_to("users.info", user=ADMIN)  # asked fresh at each open


async def test_the_next_open_after_config_set_shows_the_new_value(
    slack_real: SlackHarness,
) -> None:
    assert await open_home(slack_real, "UOWNER") == "done"
    assert "*reply*: `threads` — default" in slack_real.fake.home_text("UOWNER")
    assert "Set `reply`" in await configure(slack_real, "set team reply=all")
    assert "Set `model`" not in await configure(slack_real, "set team model=nope")
    assert await open_home(slack_real, "UOWNER") == "done"
    text = slack_real.fake.home_text("UOWNER")
    assert "*reply*: `all` — team" in text and "*model*: `gpt-4o-mini` — default" in text
    assert "Unset `reply`" in await configure(slack_real, "unset team reply")
    assert await open_home(slack_real, "UOWNER") == "done"
    assert "*reply*: `threads` — default" in slack_real.fake.home_text("UOWNER")


# -- everyone else --------------------------------------------------------------------------


async def test_non_admin_sees_how_to_use_the_bot_and_no_settings(
    slack_real: SlackHarness,
) -> None:
    asked = await slack_real.mention("what does the admin cost us?", channel="C9", user="UADMIN")
    await slack_real.wait_done(asked, timeout=10)
    assert "Set `instructions`" in await configure(slack_real, 'set team instructions="SECRET"')
    assert "Set `reply`" in await configure(slack_real, "set reply=all", channel="C7")
    assert await open_home(slack_real, "U1") == "done"
    view = slack_real.fake.home_views["U1"]
    assert check_view(view) == []
    text = slack_real.fake.home_text("U1")
    assert "`/memory`" in text and "`/config show`" in text
    for leaked in ("SECRET", "instructions", "<#C7>", "reply", "UADMIN", "Recent changes"):
        assert leaked not in text
    # Their own usage only, nobody else's.
    assert "Your usage here:" in text and "Today: 0 tokens" in text
    assert "The team this month" not in text


async def test_bot_admins_see_the_team_settings(start_harness: StartHarness, make_app: Any) -> None:
    slack = await start_harness(await make_app(bot_admins="U2"))
    assert await open_home(slack, "U2") == "done"  # not a Slack admin: BOT_ADMINS
    assert "*instructions*: _(none)_ — default" in slack.fake.home_text("U2")
    assert await open_home(slack, "U1") == "done"
    assert "instructions" not in slack.fake.home_text("U1")


# -- bounds ---------------------------------------------------------------------------------

CHANNELS = 10_000
LONG = "&<>" + "x" * 3_997  # 4,000 characters, the store's longest, escaping at its worst


async def seed_overrides(app: BotApp, team: TeamKey) -> None:
    """10,000 overriding channels (every tenth with a 4,000-character value) and a
    4,000-character team value, written at once the way the store keeps them."""
    store: Any = app.place_settings.store if app.place_settings else None
    assert store is not None and hasattr(store, "_db")  # the SQLite backend
    rows = [(team.id, TEAM_WIDE, json.dumps({"instructions": LONG, "language": "pt-BR"}))]
    for n in range(CHANNELS):
        values = {"reply": "all", "memory": "off"}
        if n % 10 == 0:
            values["instructions"] = LONG
        rows.append((team.id, f"C{n:07d}", json.dumps(values)))

    def write(conn: sqlite3.Connection) -> None:
        with transaction(conn):
            conn.executemany(
                "INSERT INTO place_settings (team, channel, doc) VALUES (?, ?, ?)", rows
            )

    await store.place_values(team, TEAM_WIDE)  # its schema first
    await store._db.call(write)


async def test_a_huge_team_publishes_a_valid_view_quickly(
    start_harness: StartHarness, make_app: Any
) -> None:
    app = await make_app()
    slack = await start_harness(app)
    await seed_overrides(app, TeamKey("slack", slack.team))
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:  # how long the event loop is ever held while the view is made
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    started = time.perf_counter()
    try:
        assert await open_home(slack, ADMIN) == "done"
    finally:
        stop.set()
        await tick
    assert time.perf_counter() - started < 10.0
    assert max(gaps) < 0.5, max(gaps)
    assert slack.fake.refused_views == []
    view = slack.fake.home_views[ADMIN]
    assert check_view(view) == [] and len(view["blocks"]) <= MAX_BLOCKS
    assert len(json.dumps(view).encode()) <= VIEW_BYTES
    text = slack.fake.home_text(ADMIN)
    assert f"Channels with their own settings ({CHANNELS:,})" in text
    assert "<#C0000000>: *instructions* `&amp;&lt;&gt;xxx" in text
    assert "more. `/config show` in a channel shows its settings." in text
    assert "_(cut: 4,000 characters in all)_" in text
    assert "*language*: `pt-BR` — team" in text


def test_admin_view_stays_within_slacks_limits_whatever_it_is_given() -> None:
    """The renderer alone, at its worst: every key long and full of `&`, 40 channels with 7
    long values each, long keys in the changes."""
    worst = "&" * 4000
    overview = SettingsOverview(
        settings=tuple(TeamSetting(k, worst, "team") for k in ("instructions", "model") * 4),
        overrides=tuple(
            ChannelOverride(f"C{n:05d}", tuple((f"k{i}", worst) for i in range(7)))
            for n in range(200)
        ),
        overrides_total=50_000,
        changes=tuple(
            SettingChange("slack:T", "", "k" * 64, None, worst, "slack:T:<!here>", 0.0)
            for _ in range(30)
        ),
    )
    view = admin_view(overview)
    assert check_view(view) == []
    assert len(json.dumps(view).encode()) <= VIEW_BYTES
    shown = json.dumps(view)
    assert "<!here>" not in shown and "&lt;!here&gt;" in shown


def test_values_and_ids_are_plain_text() -> None:
    assert plain("a <!channel> & b", 100) == "`a &lt;!channel&gt; &amp; b`"
    assert plain("has `tick`", 100) == "has `tick`"
    assert plain("", 10) == "_(none)_"
    assert plain("line\none " + "x" * 50, 10) == "`line one …` _(cut: 59 characters in all)_"
    assert channel_name("C012AB") == "<#C012AB>"
    assert channel_name("D012AB") == "a direct message (`D012AB`)"
    assert channel_name("<!channel>") == "`&lt;!channel&gt;`"


# -- failures and other tabs ----------------------------------------------------------------


@pytest.mark.parametrize("error", ["not_enabled", "ratelimited"])
async def test_a_refused_publish_is_one_log_line_and_the_next_open_works(
    start_harness: StartHarness, caplog: pytest.LogCaptureFixture, error: str
) -> None:
    slack = await start_harness(EchoCore(), rate_limit_retries=0)
    if error == "not_enabled":
        slack.fake.home_tab = False
    else:
        slack.fake.fail("views.publish", status=429, error="ratelimited", retry_after=1)
    with caplog.at_level(logging.INFO):
        assert await open_home(slack, "U1") == "failed"
    failed = [r for r in caplog.records if r.getMessage() == "slack_api_failed"]
    assert [getattr(r, "fields", {}) for r in failed] == [
        {"method": "views.publish", "error": error, "team": slack.team}
    ]
    no_tracebacks(caplog)
    assert "U1" not in slack.fake.home_views
    slack.fake.home_tab = True
    assert await open_home(slack, "U1") == "done"  # the next event is handled as ever
    assert "`/memory`" in slack.fake.home_text("U1")
    ts = await slack.mention("still there?")
    await slack.wait_done(ts)
    assert slack.replies("C1", thread_ts=ts) == ["echo: still there?"]


class StoreDownCore(EchoCore):
    async def settings_overview(
        self, team: TeamKey, user: str, *, is_platform_admin: bool
    ) -> SettingsOverview | None:
        raise StoreUnavailable("settings store down")


async def test_a_store_down_publishes_nothing_and_logs_one_line(
    start_harness: StartHarness, caplog: pytest.LogCaptureFixture
) -> None:
    slack = await start_harness(StoreDownCore())
    with caplog.at_level(logging.INFO):
        assert await open_home(slack, ADMIN) == "failed"
    failed = [r for r in caplog.records if r.getMessage() == "slack_home_failed"]
    assert [getattr(r, "fields", {}) for r in failed] == [
        {"team": slack.team, "error": "StoreUnavailable"}
    ]
    no_tracebacks(caplog)
    assert slack.fake.calls_to("views.publish") == []


async def test_the_messages_tab_publishes_nothing(slack: SlackHarness) -> None:
    assert await open_home(slack, "U1", tab="messages") == "ignored"
    assert await open_home(slack, "U2", tab="home") == "done"
    assert slack.fake.calls_to("views.publish", user_id="U1") == []
    assert slack.fake.calls_to("users.info", user="U1") == []
    assert list(slack.fake.home_views) == ["U2"]


# -- the fake stays strict ------------------------------------------------------------------


async def test_fake_views_publish_refuses_what_slack_refuses(fake_slack: FakeSlack) -> None:
    client = AsyncWebClient(token=fake_slack.bot_token, base_url=fake_slack.api_url)
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}
    ok = await client.views_publish(user_id="U1", view={"type": "home", "blocks": [section]})
    assert ok["ok"] and ok["view"]["type"] == "home" and ok["view"]["hash"]

    async def refused(**kwargs: Any) -> str:
        with pytest.raises(SlackApiError) as caught:
            await client.api_call("views.publish", json=kwargs)
        return str(caught.value.response["error"])

    too_long = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}
    header = {"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}
    for bad in (
        {"type": "modal", "blocks": [section]},
        {"type": "home"},
        {"type": "home", "blocks": [section] * 101},
        {"type": "home", "blocks": [too_long]},
        {"type": "home", "blocks": [header]},
        {"type": "home", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": ""}}]},
        {"type": "home", "blocks": [{"type": "nonsense"}]},
    ):
        assert await refused(user_id="U1", view=bad) == "invalid_arguments", bad
    assert await refused(view={"type": "home", "blocks": [section]}) == "invalid_arguments"
    assert await refused(user_id="U1") == "invalid_arguments"
    huge = {"type": "home", "blocks": [section] * 50, "private_metadata": "x" * 260_000}
    assert await refused(user_id="U1", view=huge) == "view_too_large"
    assert await refused(user_id="U1", view="{not json") == "invalid_arguments"
    stale = {"type": "home", "blocks": [section]}
    assert await refused(user_id="U1", view=stale, hash="1.stale") == "hash_conflict"
    fake_slack.home_tab = False
    assert await refused(user_id="U1", view=stale) == "not_enabled"
    anonymous = AsyncWebClient(token="xoxb-unknown", base_url=fake_slack.api_url)
    with pytest.raises(SlackApiError) as caught:
        await anonymous.views_publish(user_id="U1", view=stale)
    assert caught.value.response["error"] == "invalid_auth"
    fake_slack.tokens["xoxp-person"] = Identity(fake_slack.team_id, "U1", None)  # a user token
    person = AsyncWebClient(token="xoxp-person", base_url=fake_slack.api_url)
    with pytest.raises(SlackApiError) as caught:
        await person.views_publish(user_id="U1", view=stale)
    assert caught.value.response["error"] == "not_allowed_token_type"
    assert fake_slack.home_views["U1"]["blocks"] == [section]  # the refused ones changed nothing
