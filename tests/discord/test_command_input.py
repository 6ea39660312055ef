"""Slash commands as Discord delivers them, late, replayed or malformed: each gets an ephemeral
answer (or, when it cannot be answered any more, one log line), and each runs at most once.
Through the real discord.py client and the fake's interaction endpoints (the 3-second window
counts from the interaction's creation, as Discord's does)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from adapters.discord.interactions import STALE, UNREADABLE
from testkit.fakes.discord_api import FakeDiscord
from tests.discord.conftest import StartDiscord
from tests.discord.test_commands import answered, first_channel
from tests.slack.echo_core import EchoCore


@pytest.fixture
def place(fake_discord: FakeDiscord) -> tuple[str, str]:
    user = fake_discord.add_user("Ada")
    return first_channel(fake_discord, fake_discord.add_guild("Guild A")), user


async def test_a_command_delivered_late_is_deferred_within_the_window_from_its_creation(
    fake_discord: FakeDiscord, start_discord: StartDiscord, place: tuple[str, str]
) -> None:
    """1.2 s late and slow to answer: counted from receipt, the defer would come 3.2 s after
    creation, past the window (Discord: 404, "did not respond")."""
    channel, ada = place
    core = EchoCore(command_delay=2.5)
    await start_discord(core)  # command_inline_seconds: 2.0
    interaction = await fake_discord.run_command(
        channel, ada, "memory", "show", delivered_after=1.2
    )
    text = await answered(fake_discord, interaction)  # checks the window from creation
    assert interaction.response is not None and interaction.response["type"] == 5
    assert text == "**/memory** show"


async def test_a_command_delivered_after_its_window_is_not_run(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    place: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel, ada = place
    caplog.set_level(logging.INFO)
    core = EchoCore()
    await start_discord(core)
    await fake_discord.run_command(
        channel, ada, "memory", "forget", {"id": "all"}, delivered_after=3.3
    )
    await fake_discord.wait_for(lambda: bool(fake_discord.calls_to("POST", r"/callback$")))
    [call] = fake_discord.calls_to("POST", r"/callback$")
    assert call.status == 404 and call.body["type"] == 5  # a defer, first, and too late
    await fake_discord.wait_for(
        lambda: any(r.getMessage() == "discord_defer_failed" for r in caplog.records)
    )
    assert core.commands == []  # the erasure nobody could be told about did not run


ODD: dict[str, Any] = {
    "an unknown subcommand": [{"name": "purge", "type": 1, "options": []}],
    "options not a list": "show",
    "a subcommand whose options are not a list": [{"name": "show", "type": 1, "options": "x"}],
    "options that are not objects": [1, 2, 3],
    "an unknown option": [
        {"name": "forget", "type": 1, "options": [{"name": "everything", "type": 3, "value": "x"}]}
    ],
    "a missing required option": [{"name": "forget", "type": 1, "options": []}],
}


@pytest.mark.parametrize("case", list(ODD))
async def test_odd_options_get_a_clear_ephemeral_answer_and_nothing_runs(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    place: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    channel, ada = place
    caplog.set_level(logging.INFO)
    core = EchoCore()
    await start_discord(core)
    interaction = await fake_discord.run_command(channel, ada, "memory", "", raw_options=ODD[case])
    text = await answered(fake_discord, interaction)
    assert text in (STALE, UNREADABLE) or "Run it again" in text
    assert core.commands == []
    assert not [r for r in caplog.records if r.exc_info]


async def test_an_integer_for_a_text_option_is_refused_with_the_option_named(
    fake_discord: FakeDiscord, start_discord: StartDiscord, place: tuple[str, str]
) -> None:
    channel, ada = place
    core = EchoCore()
    await start_discord(core)
    options = [{"name": "forget", "type": 1, "options": [{"name": "id", "type": 3, "value": 5}]}]
    interaction = await fake_discord.run_command(channel, ada, "memory", "", raw_options=options)
    text = await answered(fake_discord, interaction)
    assert "`id`" in text and "text" in text
    assert core.commands == []


async def test_a_replayed_interaction_runs_once(
    fake_discord: FakeDiscord,
    start_discord: StartDiscord,
    place: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel, ada = place
    caplog.set_level(logging.INFO)
    core = EchoCore()
    await start_discord(core)
    interaction = await fake_discord.run_command(channel, ada, "memory", "forget", {"id": "all"})
    await answered(fake_discord, interaction)
    await fake_discord.replay_interaction(interaction)
    await fake_discord.wait_for(
        lambda: any(r.getMessage() == "discord_interaction_dropped" for r in caplog.records)
    )
    assert [(r.command, r.text) for r in core.commands] == [("memory", "forget all")]
    assert len(fake_discord.calls_to("POST", r"/callback$")) == 1


async def test_pack_names_are_suggested_while_typing(
    fake_discord: FakeDiscord, start_discord: StartDiscord, place: tuple[str, str]
) -> None:
    channel, ada = place
    core = EchoCore()
    await start_discord(core)
    [tools] = [c for c in fake_discord.commands[None] if c["name"] == "tools"]
    [install] = [o for o in tools["options"] if o["name"] == "install"]
    assert [o.get("autocomplete") for o in install["options"] if o["name"] == "pack"] == [True]
    focused = [{"name": "pack", "type": 3, "value": "wea", "focused": True}]
    interaction = await fake_discord.run_command(
        channel,
        ada,
        "tools",
        "",
        raw_options=[{"name": "install", "type": 1, "options": focused}],
        interaction_type=4,
    )
    await fake_discord.wait_for(lambda: interaction.response is not None)
    response = interaction.response
    assert response is not None and response["type"] == 8
    values = [c["value"] for c in response["data"]["choices"]]
    assert values == ["weather"]
    assert core.commands == []  # a suggestion runs nothing
