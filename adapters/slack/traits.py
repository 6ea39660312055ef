"""What the core needs to know about Slack, handed to it as data (`bot.platforms`).

Imports nothing of slack_bolt or slack_sdk, so listing the platforms (`bot --help`, `bot chat`)
stays cheap.
"""

from __future__ import annotations

from bot.platforms import PlatformTraits

INBOX_KIND = "slack.message"  # what the adapter writes to the durable inbox


def _ts_time(message_id: str) -> float | None:
    """A Slack message id (`ts`) is its Unix time."""
    try:
        return float(message_id)
    except (TypeError, ValueError, OverflowError):
        return None


def _configured() -> bool:
    from adapters.slack.settings import load_slack_settings

    return load_slack_settings().configured


def _multi_tenant() -> bool:
    from adapters.slack.settings import load_slack_settings

    return load_slack_settings().multi_tenant


SLACK = PlatformTraits(
    name="slack",
    display_name="Slack",
    team_word="workspace",
    # Slack DMs belong to a workspace (their team is the workspace id): no DM scope.
    dm_scope=False,
    dm_channel_prefix="D",
    inbox_kinds=(INBOX_KIND,),
    message_time=_ts_time,
    library_loggers=("slack_bolt", "slack_sdk"),
    cli_help="run the Slack app (Socket Mode if SLACK_APP_TOKEN is set, else HTTP)",
    main_module="adapters.slack.main",
    runs_workers=True,
    person_example="slack:T123:U456",
    configured=_configured,
    multi_tenant=_multi_tenant,
)
