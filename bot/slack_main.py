"""`bot slack`: the composition root that puts the Slack adapter on the core.

Single workspace: SLACK_BOT_TOKEN + SLACK_SIGNING_SECRET. Multi-workspace (SLACK_CLIENT_ID and
SLACK_CLIENT_SECRET set): installations and OAuth states live in the bot's own store (SQLite or
MongoDB), so several bot processes share them and they survive restarts; with BOT_SECRET_KEY set
each installation document is sealed (encrypted) there, as they hold bot tokens.
"""

from __future__ import annotations

from bot.app import build_app
from bot.config import ConfigError, Settings
from bot.sealed_installations import SealedInstallations
from bot.secrets import SecretBox
from bot.stores.protocols import InstallationDocStore


async def run(settings: Settings) -> int:
    from adapters.slack import SlackConfig, SlackConfigError, run_slack

    try:
        config = SlackConfig.from_settings(settings)
    except SlackConfigError as exc:
        raise ConfigError(str(exc)) from None
    core = await build_app(settings)
    storage: InstallationDocStore | None = None
    if config.client_id:
        box = SecretBox.from_settings(settings)
        storage = core.store if box is None else SealedInstallations(core.store, box)
    try:
        await run_slack(core, config, storage=storage)
    except SlackConfigError as exc:
        raise ConfigError(str(exc)) from None
    finally:
        await core.close()
    return 0
