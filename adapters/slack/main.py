"""`bot slack`: the composition root that puts the Slack adapter on the core.

Single workspace: SLACK_BOT_TOKEN + SLACK_SIGNING_SECRET. Multi-workspace (SLACK_CLIENT_ID and
SLACK_CLIENT_SECRET set): installations and OAuth states live in the bot's own store (SQLite or
MongoDB) through Slack's own storage on the store's connection (`adapters.slack.installations`;
`Store` carries none of it), so several bot processes share them and they survive restarts;
with BOT_SECRET_KEY set each installation document is sealed (encrypted) there, as they hold
bot tokens.
"""

from __future__ import annotations

from adapters.common.startup import running_core
from adapters.slack.config import SlackConfig, SlackConfigError
from adapters.slack.installations import slack_installation_storage
from adapters.slack.oauth import SlackInstallationStorage
from adapters.slack.runner import run_slack
from adapters.slack.settings import load_slack_settings
from adapters.slack.traits import SLACK
from bot.config import ConfigError, Settings
from bot.platforms import register

WORKERS_SOCKET_MODE = (
    "Socket Mode (SLACK_APP_TOKEN) runs one process: use --workers 1 (BOT_WORKERS=1), "
    "or serve Slack over HTTP to run several workers"
)


def _config(settings: Settings) -> SlackConfig:
    try:
        config = SlackConfig.from_settings(settings, load_slack_settings())
        config.validate()  # before any store is opened
    except SlackConfigError as exc:
        raise ConfigError(str(exc)) from None
    return config


def check_workers(settings: Settings, workers: int) -> float:
    """`bot slack --workers N` (N > 1): ConfigError (one line) for settings workers cannot
    share, else how long each worker may drain at shutdown. Socket Mode is refused: Slack would
    spread events over one socket per worker, but each socket is one more connection against
    the app's limit of 10 and the gain is small (events arrive at Slack's pace, not at the
    port's); HTTP is the mode that scales."""
    config = _config(settings)
    if config.socket_mode:
        raise ConfigError(WORKERS_SOCKET_MODE)
    if config.http_port == 0:
        raise ConfigError(
            "BOT_HTTP_PORT=0 gives each worker a port of its own: set a port to share"
        )
    return config.shutdown_grace_seconds


async def main(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT; ConfigError (one line) for bad settings."""
    register(SLACK)
    config = _config(settings)
    async with running_core(settings) as core:
        storage: SlackInstallationStorage | None = None
        if config.client_id:
            storage = slack_installation_storage(core.store, settings)
        try:
            await run_slack(core, config, storage=storage)
        except SlackConfigError as exc:
            raise ConfigError(str(exc)) from None
    return 0
