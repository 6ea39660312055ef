"""The Slack adapter: a Bolt app over HTTP or Socket Mode that drives the platform-neutral core.

Entry points: `run_slack(core, config)` for `bot slack`, `create_http_app(core, config)` for
tests and embedding. Multi-workspace installs need a `SlackInstallationStorage` (see oauth.py).
"""

from adapters.slack.config import SlackConfig, SlackConfigError
from adapters.slack.oauth import MemoryInstallationStorage, SlackInstallationStorage
from adapters.slack.runner import run_slack
from adapters.slack.server import create_http_app

__all__ = [
    "MemoryInstallationStorage",
    "SlackConfig",
    "SlackConfigError",
    "SlackInstallationStorage",
    "create_http_app",
    "run_slack",
]
