"""/memory and /tools as application commands: ephemeral answers, the 3-second window,
deferral, the admin check from the interaction's permissions, guild isolation."""

from __future__ import annotations

from typing import Any

from testkit.fakes.discord_api import EPHEMERAL, INTERACTION_WINDOW, FakeDiscord, Interaction
from tests.discord.conftest import StartDiscord
from tests.discord.harness import DiscordHarness
from tests.slack.echo_core import EchoCore

ADMINISTRATOR, MANAGE_GUILD, MANAGE_MESSAGES = 1 << 3, 1 << 5, 1 << 13


def first_channel(fake: FakeDiscord, guild: str) -> str:
    return next(c for c, v in fake.channels.items() if v.get("guild_id") == guild)


async def answered(fake: FakeDiscord, interaction: Interaction) -> str:
    """The text the person saw; every message of the answer must be ephemeral."""
    await fake.wait_for(
        lambda: (
            interaction.response is not None
            and (interaction.response["type"] == 4 or bool(interaction.followups))
        )
    )
    assert interaction.responded_at is not None
    assert interaction.responded_at - interaction.created < INTERACTION_WINDOW
    response = interaction.response
    assert response is not None
    flags = int((response.get("data") or {}).get("flags", 0))
    assert flags & EPHEMERAL, response
    if response["type"] == 4:
        return str(response["data"]["content"])
    assert all(f["flags"] & EPHEMERAL for f in interaction.followups)
    return "\n".join(str(f["content"]) for f in interaction.followups)


async def test_commands_are_synced_to_the_configured_guilds(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    guild = fake_discord.add_guild("Guild A")
    await start_discord(EchoCore(), command_guilds=(int(guild),))
    assert None not in fake_discord.commands  # nothing global
    names = {c["name"]: c for c in fake_discord.commands[guild]}
    assert set(names) == {"memory", "tools", "config", "usage"}
    config = {o["name"]: o for o in names["config"]["options"]}
    assert set(config) == {"show", "set", "unset", "history", "grants", "revoke"}
    key = next(o for o in config["set"]["options"] if o["name"] == "key")
    assert [c["value"] for c in key["choices"]][:3] == ["instructions", "model", "tools"]
    assert names["config"]["contexts"] == [guild_ctx := 0]
    subs = {o["name"] for o in names["memory"]["options"]}
    assert subs == {"show", "forget"}
    assert {o["name"] for o in names["tools"]["options"]} == {"list", "install", "remove", "audit"}
    guild_ctx, bot_dm_ctx = 0, 1  # Discord's interaction context types
    assert names["tools"]["contexts"] == [guild_ctx]  # tool packs belong to a guild
    assert sorted(names["memory"]["contexts"]) == [guild_ctx, bot_dm_ctx]
    assert names["tools"]["integration_types"] == [0] == names["memory"]["integration_types"]


async def test_each_command_maps_to_the_shared_handler_text(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    ada = fake_discord.add_user("Ada")
    guild = fake_discord.add_guild("Guild A")
    channel = first_channel(fake_discord, guild)
    core = EchoCore()
    await start_discord(core)
    runs = [
        ("memory", "show", {}, "show"),
        ("memory", "show", {"history": True}, "show history"),
        ("memory", "forget", {"id": "f1a2"}, "forget f1a2"),
        ("memory", "forget", {"id": "all"}, "forget all"),
        ("tools", "list", {}, "list"),
        (
            "tools",
            "install",
            {"pack": "orders", "settings": "url=https://x token=t"},
            "install orders url=https://x token=t",
        ),
        ("tools", "remove", {"pack": "orders"}, "remove orders"),
        ("config", "show", {}, "show"),
        (
            "config",
            "set",
            {"key": "instructions", "value": "Be brief, please", "scope": "team"},
            "set team instructions='Be brief, please'",
        ),
        ("config", "set", {"key": "memory", "value": "off"}, "set memory=off"),
        ("config", "unset", {"key": "memory", "scope": "channel"}, "unset memory"),
        ("config", "history", {}, "history"),
    ]
    for name, sub, options, _ in runs:
        interaction = await fake_discord.run_command(
            channel, ada, name, sub, options, permissions=ADMINISTRATOR
        )
        await answered(fake_discord, interaction)
    assert [(r.command, r.text) for r in core.commands] == [(n, t) for n, _, _, t in runs]
    assert {(r.platform, r.team, r.user) for r in core.commands} == {("discord", guild, ada)}


async def test_admin_check_uses_the_interactions_own_permissions_and_the_owner(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    owner = fake_discord.add_user("Owner")
    member = fake_discord.add_user("Member")
    guild = fake_discord.add_guild("Guild A", owner=owner)
    channel = first_channel(fake_discord, guild)
    core = EchoCore()
    await start_discord(core)
    cases = [
        (member, 0, False),
        (member, MANAGE_MESSAGES, False),
        (member, MANAGE_GUILD, True),
        (member, ADMINISTRATOR, True),
        (owner, 0, True),
    ]
    texts = []
    for user, permissions, _ in cases:
        interaction = await fake_discord.run_command(
            channel, user, "tools", "install", {"pack": "weather"}, permissions=permissions
        )
        texts.append(await answered(fake_discord, interaction))
    assert [r.is_platform_admin for r in core.commands] == [admin for *_, admin in cases]
    assert texts[0].startswith("Sorry, only workspace admins")


async def test_a_slow_command_is_deferred_in_time_then_followed_up(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    ada = fake_discord.add_user("Ada")
    channel = first_channel(fake_discord, fake_discord.add_guild("Guild A"))
    core = EchoCore(command_delay=1.0)
    await start_discord(core, command_inline_seconds=0.2)
    interaction = await fake_discord.run_command(channel, ada, "memory", "show")
    text = await answered(fake_discord, interaction)
    assert interaction.response is not None and interaction.response["type"] == 5  # deferred
    assert text == "**/memory** show"
    assert interaction.responded_at is not None
    assert interaction.responded_at - interaction.created < 1.0  # long before the answer


async def test_tools_in_a_dm_is_refused_politely(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    core = EchoCore()
    h = await start_discord(core)
    fake_discord.commands[None] = fake_discord.commands.get(None) or []
    interaction = await fake_discord.run_command(dm, ada, "tools", "install", {"pack": "weather"})
    assert "per server" in await answered(fake_discord, interaction)
    assert core.commands == []
    interaction = await fake_discord.run_command(dm, ada, "memory", "show")
    await answered(fake_discord, interaction)
    assert [(r.team, r.command) for r in core.commands] == [("@dm", "memory")]
    assert h.runtime.client.is_ready()


async def _remember(h: DiscordHarness, channel: str, user: str, fact: str) -> None:
    fake = h.fake
    before = len(fake.bot_messages(channel))
    await fake.user_says(
        channel, user, f"{h.mention()} remember that {fact}", mentions=[fake.app_id]
    )
    await fake.wait_for(lambda: len(fake.bot_messages(channel)) > before)
    await h.idle()


async def test_guilds_never_share_facts_or_tool_installs_and_forget_all_is_per_guild(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    admin_a = fake_discord.add_user("AdminA")
    guild_a = fake_discord.add_guild("Guild A", owner=admin_a)
    guild_b = fake_discord.add_guild("Guild B")
    in_a, in_b = first_channel(fake_discord, guild_a), first_channel(fake_discord, guild_b)
    h = await start_discord(await make_app())

    await _remember(h, in_a, ada, "I like green tea")
    await _remember(h, in_b, ada, "my cat is called Miso")

    async def run(channel: str, user: str, name: str, sub: str, **options: Any) -> str:
        interaction = await fake_discord.run_command(channel, user, name, sub, options)
        return await answered(fake_discord, interaction)

    shown_a = await run(in_a, ada, "memory", "show")
    shown_b = await run(in_b, ada, "memory", "show")
    assert "green tea" in shown_a and "Miso" not in shown_a
    assert "Miso" in shown_b and "green tea" not in shown_b

    assert "Installed" in await run(in_a, admin_a, "tools", "install", pack="weather")
    assert "weather" in await run(in_a, ada, "tools", "list")
    assert "No tool packs are installed here" in await run(in_b, ada, "tools", "list")

    erased = await run(in_a, ada, "memory", "forget", id="all")
    assert erased.startswith("Done.") and "1 fact(s)" in erased
    assert "green tea" not in await run(in_a, ada, "memory", "show")
    assert "Miso" in await run(in_b, ada, "memory", "show")
