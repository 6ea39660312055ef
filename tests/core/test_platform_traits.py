"""The core's rules per platform come from the adapters' traits (`bot.platforms`), listed once
by the composition root (`adapters.platforms`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.discord.handlers import DM_TEAM
from adapters.discord.handlers import INBOX_KIND as DISCORD_KIND
from adapters.discord.handlers import PLATFORM as DISCORD_NAME
from adapters.platforms import PLATFORMS, register_platforms
from adapters.slack.handlers import INBOX_KIND as SLACK_KIND
from adapters.slack.handlers import PLATFORM as SLACK_NAME
from bot import platforms
from bot.audience import PUBLIC
from bot.keys import PersonKey
from bot.memory.heard import id_time
from bot.memory.speaker_facts import everywhere, has_dm_scope, team_word
from bot.stores.fact_common import message_audience

ROOT = Path(__file__).resolve().parents[2]


def test_the_composition_root_lists_each_platform_once() -> None:
    assert [p.name for p in PLATFORMS] == [SLACK_NAME, DISCORD_NAME] == ["slack", "discord"]
    assert DM_TEAM == platforms.DM_SCOPE  # the Discord adapter files DMs under the DM scope
    assert register_platforms() == PLATFORMS
    assert platforms.inbox_kinds() == (SLACK_KIND, DISCORD_KIND)
    for traits in PLATFORMS:
        assert traits.cli_help and traits.main_module == f"adapters.{traits.name}.main"
        assert platforms.traits_of(traits.name) is traits


def test_a_platform_nobody_described_gets_neutral_traits() -> None:
    console = platforms.traits_of("console")
    assert console.name == "console" and console.title == "Console"
    assert console.team_word == "team" and not console.dm_scope and not console.multi_tenant()
    assert console.message_time("1700000000.5") is None
    assert not has_dm_scope("console") and team_word("console") == "team"
    assert message_audience("console:local:D1:-", {}) == PUBLIC  # no DM prefix on the console


def test_the_traits_carry_what_the_core_used_to_hard_code() -> None:
    assert team_word("slack") == "workspace" and team_word("discord") == "server"
    assert has_dm_scope("discord") and not has_dm_scope("slack")
    assert everywhere(PersonKey("discord", "@dm", "42")) == (
        "Discord, in your DMs and every server"
    )
    assert id_time("slack", "1700000000.123456") == pytest.approx(1700000000.123456)
    assert id_time("discord", str(1 << 22)) == pytest.approx(1_420_070_400.001)
    assert id_time("discord", "not-a-snowflake") is None
    # Old messages without an audience: a Slack D... channel and a Discord DM are DMs by id; an
    # old Discord message is the narrowest (private channels were never flagged there).
    assert message_audience("slack:T1:D123:-", {}).startswith("dm:")
    assert message_audience("slack:T1:C123:-", {}) == PUBLIC
    assert message_audience("discord:@dm:42:-", {}).startswith("dm:")
    assert message_audience("discord:111:222:-", {}).startswith("dm:")


def test_multi_tenant_comes_from_the_platforms_own_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SLACK_CLIENT_ID", "SLACK_BOT_TOKEN", "DISCORD_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert not platforms.multi_tenant()
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")  # one workspace: its admins are the operator
    assert not platforms.multi_tenant()
    monkeypatch.setenv("SLACK_CLIENT_ID", "1.2")
    assert platforms.multi_tenant()
    monkeypatch.delenv("SLACK_CLIENT_ID")
    monkeypatch.setenv("DISCORD_TOKEN", "t")
    assert platforms.multi_tenant()


def test_listing_the_platforms_loads_no_platform_library() -> None:
    """`bot --help` and `bot chat` read the platforms' traits, never slack_bolt or discord.py."""
    code = (
        "import json, sys\n"
        "from bot import cli\n"
        "cli._parser().format_help()\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('slack_bolt', 'slack_sdk', 'discord'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
