"""`BotCore.settings_overview` (what Slack's App Home shows admins): admins only, the team's
effective values with their source, overriding channels capped but counted, the team's own
changes only, read from the cached settings so a change shows at the next read."""

from __future__ import annotations

from typing import Any

from bot.core import CommandRequest
from bot.keys import TeamKey
from bot.policy import KEYS
from bot.settings_overview import team_overview

TEAM = TeamKey("test", "T1")


async def config(app: Any, text: str, channel: str = "C1") -> None:
    reply = await app.handle_command(
        CommandRequest("test", "T1", channel, "UADMIN", "config", text, is_platform_admin=True)
    )
    assert reply.ok, reply.text


async def test_only_admins_get_the_overview(make_app: Any) -> None:
    app = await make_app(bot_admins="UBOTADMIN")
    assert await app.settings_overview(TEAM, "UMEMBER", is_platform_admin=False) is None
    assert await app.settings_overview(TEAM, "UADMIN", is_platform_admin=True) is not None
    assert await app.settings_overview(TEAM, "UBOTADMIN", is_platform_admin=False) is not None


async def test_values_sources_overrides_and_changes(make_app: Any) -> None:
    app = await make_app()
    await config(app, 'set team language=de instructions="Be kind."')
    await config(app, "set reply=all", channel="C9")
    await config(app, "set memory=off", channel="C2")
    await config(app, "set reply=mention", channel="C3")
    await config(app, "unset reply", channel="C3")  # nothing left of its own: not listed
    overview = await app.settings_overview(TEAM, "UADMIN", is_platform_admin=True)
    assert overview is not None and overview.kept
    rows = {s.key: (s.value, s.source) for s in overview.settings}
    assert list(rows) == list(KEYS)
    assert rows["language"] == ("de", "team") and rows["instructions"] == ("Be kind.", "team")
    assert rows["reply"] == ("threads", "default") and rows["tools"] == ("all", "default")
    assert [(o.channel, o.values) for o in overview.overrides] == [
        ("C2", (("memory", "off"),)),
        ("C9", (("reply", "all"),)),
    ]
    assert overview.overrides_total == 2
    # The team's own changes only (one command: the same time, either order).
    assert sorted((c.key, c.channel) for c in overview.changes) == [
        ("instructions", ""),
        ("language", ""),
    ]
    await config(app, "set team language=fr")  # the next read sees it (the cache was dropped)
    again = await app.settings_overview(TEAM, "UADMIN", is_platform_admin=True)
    assert again is not None
    assert {s.key: s.value for s in again.settings}["language"] == "fr"
    assert again.changes[0].key == "language" and again.changes[0].new == "fr"


async def test_channels_are_capped_but_counted(make_app: Any) -> None:
    app = await make_app()
    for n in range(7):
        await config(app, "set reply=all", channel=f"C{n}")
    overview = await team_overview(app.place_settings, app.policies, TEAM, channels=3, changes=2)
    assert [o.channel for o in overview.overrides] == ["C0", "C1", "C2"]
    assert overview.overrides_total == 7 and len(overview.changes) == 0  # channel changes


async def test_no_settings_store_shows_the_defaults(make_app: Any) -> None:
    app = await make_app()
    overview = await team_overview(None, app.policies, TEAM)
    assert not overview.kept and overview.overrides == () and overview.changes == ()
    assert all(s.source == "default" for s in overview.settings)
