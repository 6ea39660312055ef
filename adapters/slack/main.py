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


async def main(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT; ConfigError (one line) for bad settings."""
    register(SLACK)
    try:
        config = SlackConfig.from_settings(settings, load_slack_settings())
        config.validate()  # before any store is opened
    except SlackConfigError as exc:
        raise ConfigError(str(exc)) from None
    async with running_core(settings) as core:
        storage: SlackInstallationStorage | None = None
        if config.client_id:
            storage = slack_installation_storage(core.store, settings)
        try:
            await run_slack(core, config, storage=storage)
        except SlackConfigError as exc:
            raise ConfigError(str(exc)) from None
    return 0
