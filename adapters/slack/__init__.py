"""The Slack adapter: a Bolt app over HTTP or Socket Mode that drives the platform-neutral core.

Entry points: `run_slack(core, config)` for `bot slack`, `create_http_app(core, config)` for
tests and embedding. Multi-workspace installs need a `SlackInstallationStorage` (see oauth.py).
The names below are imported on first use, so `adapters.slack.traits` (read by the CLI and
`bot chat`) does not load slack_bolt.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adapters.slack.config import SlackConfig, SlackConfigError
    from adapters.slack.oauth import MemoryInstallationStorage, SlackInstallationStorage
    from adapters.slack.runner import run_slack
    from adapters.slack.server import create_http_app

_WHERE = {
    "MemoryInstallationStorage": "adapters.slack.oauth",
    "SlackConfig": "adapters.slack.config",
    "SlackConfigError": "adapters.slack.config",
    "SlackInstallationStorage": "adapters.slack.oauth",
    "create_http_app": "adapters.slack.server",
    "run_slack": "adapters.slack.runner",
}

__all__ = [
    "MemoryInstallationStorage",
    "SlackConfig",
    "SlackConfigError",
    "SlackInstallationStorage",
    "create_http_app",
    "run_slack",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
