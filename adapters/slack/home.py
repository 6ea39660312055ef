"""The App Home tab: on `app_home_opened` (tab `home`), `views.publish` for that person.

Admins (Slack admins/owners from a fresh `users.info`, or `BOT_ADMINS`: the rule of `/config
set`) see the team's settings from the core (`BotCore.settings_overview`): each key with its
team value and whether it is the default or set for the team, the channels that override them,
and the team's last changes. Everyone else sees what the bot is and how to use `/memory` and
`/config show`, and nothing of anyone else's.

Rendered at open time from the core's cached settings, so a `/config set` shows at the next
open (no push). Why bounded here: Slack refuses a view of more than 100 blocks, a section text
over 3,000 characters or 250 KB of JSON, and a team may have 10,000 overriding channels or a
4,000-character value. So values are cut to one line with a note, the channels listed are
capped ("and N more"), and the whole view is checked against the limits before it goes out.
Values typed by admins are plain text: `&`, `<`, `>` escaped and `verbatim` set, so a value
can never mention `<!channel>` or anyone else.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters.common.logs import emit
from adapters.slack.errors import api_failed
from adapters.slack.mrkdwn import escape
from adapters.slack.users import UserDirectory
from bot.core import BotCore, CommandRequest
from bot.keys import TeamKey
from bot.settings_overview import SettingsOverview

_LOG = logging.getLogger(__name__)
PLATFORM = "slack"

# Slack's limits for a view (docs.slack.dev: Block Kit, views.publish).
MAX_BLOCKS = 100
SECTION_CHARS = 3000
HEADER_CHARS = 150
VIEW_BYTES = 250_000
# What this view shows at most.
TEAM_VALUE_CHARS = 300  # a team value, one line (escaped: at most 5x, well under a section)
CHANNEL_VALUE_CHARS = 60  # each value of an overriding channel (7 keys fit one section)
CHANGES_SHOWN = 10

_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{1,30}")
_DM_ID = re.compile(r"D[A-Z0-9]{1,30}")
_USER_ID = re.compile(r"[UW][A-Z0-9]{1,30}")

EVERYONE_TEXT = (
    "I'm the AI assistant of this workspace. Mention me in a channel and I answer in a "
    "thread; send me a direct message any time. I remember what you ask me to remember."
)
MEMORY_TEXT = (
    "*`/memory`* shows what I remember about you; `/memory forget <id>` erases one fact and "
    "`/memory forget all` everything I hold about you."
)
CONFIG_TEXT = (
    "*`/config show`* in a channel shows how I behave there: each setting and where it comes "
    "from (default, team or channel). Admins change them."
)


def plain(value: str, limit: int) -> str:
    """An admin-typed value as mrkdwn that shows it as typed: one line, cut to `limit`
    characters with a note, `&<>` escaped, in a code span unless it holds a backtick."""
    if not value:
        return "_(none)_"
    one_line = " ".join(value.split())
    note = ""
    if len(one_line) > limit:
        note = f" _(cut: {len(value):,} characters in all)_"
        one_line = one_line[: limit - 1] + "…"
    shown = escape(one_line)
    return (f"`{shown}`" if "`" not in shown else shown) + note


def fit(text: str, limit: int = SECTION_CHARS) -> str:
    """`text` within `limit` characters, never ending inside an escape (`&amp;`)."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    amp = cut.rfind("&", max(0, len(cut) - 5))
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"


def channel_name(channel: str) -> str:
    """A channel as a link Slack renders (`<#C…>`) when it is a channel id, else plain."""
    if _CHANNEL_ID.fullmatch(channel):
        return f"<#{channel}>"
    if _DM_ID.fullmatch(channel):
        return f"a direct message (`{channel}`)"
    return plain(channel, 40)


def person_name(by: str) -> str:
    """The author of a change (a person key `slack:T:U`) as a mention, or plain."""
    user = by.rsplit(":", 1)[-1]
    return f"<@{user}>" if _USER_ID.fullmatch(user) else escape(fit(by, 60))


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": fit(text), "verbatim": True}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text)}


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": fit(text, HEADER_CHARS)}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [_mrkdwn(text)]}


def _divider() -> dict[str, Any]:
    return {"type": "divider"}


def home_view(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "home", "blocks": blocks}


def everyone_view(usage: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the bot is and how to use it, and the person's own usage; no one else's data."""
    return home_view(
        [
            _header("Your AI assistant"),
            _section(EVERYONE_TEXT),
            _section(MEMORY_TEXT),
            _section(CONFIG_TEXT),
            *(usage or []),
        ]
    )


def usage_blocks(text: str, title: str) -> list[dict[str, Any]]:
    """`/usage`'s answer as a few sections (each under Slack's section limit)."""
    blocks: list[dict[str, Any]] = [_divider(), _header(title)]
    chunk: list[str] = []
    for line in text.splitlines():
        if chunk and len("\n".join([*chunk, line])) > SECTION_CHARS - 100:
            blocks.append(_mrkdwn_section("\n".join(chunk)))
            chunk = []
            if len(blocks) >= USAGE_BLOCKS:
                break
        chunk.append(fit(line, SECTION_CHARS - 100))
    if chunk and len(blocks) < USAGE_BLOCKS + 1:
        blocks.append(_mrkdwn_section("\n".join(chunk)))
    return blocks


def _mrkdwn_section(text: str) -> dict[str, Any]:
    """A section of the bot's own text (its mentions of places and people are meant)."""
    return {"type": "section", "text": {"type": "mrkdwn", "text": fit(text), "verbatim": True}}


def admin_view(
    overview: SettingsOverview, usage: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The team's settings for an admin, within Slack's limits whatever the team holds."""
    head: list[dict[str, Any]] = [
        _header("Settings of this workspace"),
        _context(
            "Each setting's value for the whole team and where it comes from (`default` or "
            "`team`); a channel's own settings win over these. Change them with "
            "`/config set team KEY=VALUE` (or, without `team`, for one channel)."
            if overview.kept
            else "This deployment keeps no settings: every place runs on the defaults."
        ),
    ]
    head += [
        _section(f"*{s.key}*: {plain(s.value, TEAM_VALUE_CHARS)} — {s.source}")
        for s in overview.settings
    ]
    tail: list[dict[str, Any]] = [_divider(), _header("Recent changes to the team's settings")]
    if overview.changes:
        lines = [
            f"• {_when(c.at)} — {person_name(c.by)} *{escape(fit(c.key, 64))}*"
            for c in overview.changes[:CHANGES_SHOWN]
        ]
        tail.append(_section("\n".join(lines)))
        tail.append(_context("`/config history` in a channel lists its changes, with values."))
    else:
        tail.append(_context("No team-wide setting has been changed yet."))

    tail += usage or []
    total = overview.overrides_total
    overrides = [_divider(), _header(f"Channels with their own settings ({total:,})")]
    room = MAX_BLOCKS - len(head) - len(tail) - len(overrides) - 1  # 1: the "more" line
    channels = [
        _section(
            f"{channel_name(o.channel)}: "
            + " · ".join(f"*{k}* {plain(v, CHANNEL_VALUE_CHARS)}" for k, v in o.values)
        )
        for o in overview.overrides[: max(0, room)]
    ]
    view = home_view(head + overrides + channels + _more(overview, len(channels)) + tail)
    # The caps above keep a view far under 250 KB; should they ever not, drop channels.
    while len(json.dumps(view).encode()) > VIEW_BYTES and channels:
        channels = channels[: len(channels) // 2]
        view = home_view(head + overrides + channels + _more(overview, len(channels)) + tail)
    return view


def _more(overview: SettingsOverview, listed: int) -> list[dict[str, Any]]:
    if overview.overrides_total == 0:
        return [_context("No channel overrides the team's settings.")]
    left = overview.overrides_total - listed
    if left <= 0:
        return []
    return [_context(f"…and {left:,} more. `/config show` in a channel shows its settings.")]


USAGE_BLOCKS = 8  # sections of usage at most (the rest of a long report is left out)


def _when(at: float) -> str:
    try:
        return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return "?"


class AppHome:
    """Publishes the Home view of whoever opens it."""

    def __init__(self, core: BotCore, users: UserDirectory) -> None:
        self.core = core
        self.users = users

    async def opened(self, event: dict[str, Any], *, team: str, client: AsyncWebClient) -> str:
        """Publish the view for the person who opened the Home tab; returns the outcome for
        `slack_event_handled`: `done`, `failed` (one log line said why) or `ignored`."""
        user = str(event.get("user") or "")
        if event.get("tab") != "home" or not user:
            return "ignored"  # the Messages tab (the assistant) has nothing to publish
        try:
            view = await self._view(client, team, user)
        except Exception as exc:  # a store down: nothing published, one line, no traceback
            emit(_LOG, "slack_home_failed", logging.WARNING, team=team, error=type(exc).__name__)
            return "failed"
        try:
            await client.views_publish(user_id=user, view=view)
        except Exception as exc:
            api_failed(_LOG, "views.publish", exc, team=team)
            return "failed"
        return "done"

    async def _view(self, client: AsyncWebClient, team: str, user: str) -> dict[str, Any]:
        person = await self.users.get(client, team, user, fresh=True)
        admin = bool(person and person.is_platform_admin)
        overview = await self.core.settings_overview(
            TeamKey(PLATFORM, team), user, is_platform_admin=admin
        )
        usage = await self.core.handle_command(
            CommandRequest(PLATFORM, team, "-", user, "usage", "", is_platform_admin=admin)
        )
        if overview is None:
            return everyone_view(usage_blocks(usage.text, "Your usage"))
        return admin_view(overview, usage_blocks(usage.text, "Usage"))
