"""One registry drives every command surface (issue 21): the Slack manifest, the application
commands Discord receives at sync (through the real discord.py client and the fake's REST), the
console's `/help` and what it runs, all compared with `bot.command_registry`. (What each
Discord subcommand sends the core is tested in test_commands.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bot.command_registry import COMMANDS, Command
from testkit.fakes.discord_api import FakeDiscord
from testkit.fakes.openai_server import FakeOpenAI
from tests.discord.conftest import StartDiscord
from tests.e2e.test_chat_cli import run_chat
from tests.slack.echo_core import EchoCore

ROOT = Path(__file__).resolve().parents[2]
GUILD, BOT_DM = 0, 1  # Discord's interaction context types
SUB_COMMAND, STRING, BOOLEAN = 1, 3, 5  # Discord's application command option types


def test_the_slack_manifest_lists_the_registry() -> None:
    manifest = yaml.safe_load((ROOT / "manifest.yaml").read_text())
    listed = {c["command"]: c for c in manifest["features"]["slash_commands"]}
    assert set(listed) == {f"/{c.name}" for c in COMMANDS}
    for command in COMMANDS:
        entry = listed[f"/{command.name}"]
        assert entry["description"] == command.description
        assert entry["usage_hint"] == command.usage_hint
        assert entry["should_escape"] is False  # the core reads the text as typed


def _expected_option(command: Command, sub_name: str) -> dict[str, Any]:
    sub = command.sub(sub_name)
    assert sub is not None
    options = []
    for arg in sorted(sub.args, key=lambda a: not a.required):  # Discord: required first
        option: dict[str, Any] = {
            "name": arg.name,
            "description": arg.description,
            "type": BOOLEAN if arg.flag else STRING,
            "required": arg.required,
        }
        if arg.choices:
            option["choices"] = [
                {"name": label.replace("{team}", "server"), "value": value}
                for label, value in arg.choices
            ]
        if arg.complete:
            option["autocomplete"] = True
        options.append(option)
    return {
        "name": sub.name,
        "description": sub.description.replace("(admins)", "(server admins)"),
        "type": SUB_COMMAND,
        "options": options,
    }


def _seen_option(option: dict[str, Any]) -> dict[str, Any]:
    seen = {k: option[k] for k in ("name", "description", "type")}
    seen["options"] = []
    for arg in option.get("options", []):
        kept = {k: arg[k] for k in ("name", "description", "type")}
        kept["required"] = bool(arg.get("required", False))
        if arg.get("choices"):
            kept["choices"] = [{"name": c["name"], "value": c["value"]} for c in arg["choices"]]
        if arg.get("autocomplete"):
            kept["autocomplete"] = True
        seen["options"].append(kept)
    return seen


async def test_discord_receives_the_registry_at_sync(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    guild = fake_discord.add_guild("Guild A")
    await start_discord(EchoCore(), command_guilds=(int(guild),))
    synced = {c["name"]: c for c in fake_discord.commands[guild]}
    assert set(synced) == {c.name for c in COMMANDS}
    for command in COMMANDS:
        got = synced[command.name]
        assert got["description"] == command.description
        assert sorted(got["contexts"]) == ([GUILD, BOT_DM] if command.in_dms else [GUILD])
        assert [o["name"] for o in got["options"]] == [s.name for s in command.subcommands]
        for option in got["options"]:
            assert _seen_option(option) == _expected_option(command, option["name"])


def test_console_help_and_commands_come_from_the_registry(tmp_path: Path) -> None:
    fake = FakeOpenAI().start_in_thread()
    try:
        out = run_chat(["/help", "/config show", "/memory"], fake=fake, data_dir=tmp_path / "d")
    finally:
        fake.stop()
    assert out.returncode == 0, out.stderr
    assert fake.requests == []  # none of these went to the model
    for command in COMMANDS:
        assert f"/{command.name}: {command.description}" in out.stdout
        for sub in command.subcommands:
            assert f"/{command.name} {sub.usage}: {sub.description}" in out.stdout
    assert "/attach PATH" in out.stdout
    assert "instructions" in out.stdout and "default" in out.stdout  # /config show ran
    assert "remember" in out.stdout.lower()  # /memory answered
