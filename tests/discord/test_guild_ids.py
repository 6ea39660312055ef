"""Guild ids are parsed once (`adapters.discord.settings.parse_guild_ids`), with one rule for
the settings check and the adapter's config: ASCII digits fitting in 64 bits, `*` only where
every guild is meant (DISCORD_THREAD_GUILDS)."""

from __future__ import annotations

import pytest

from adapters.discord.config import DiscordConfig, DiscordConfigError
from adapters.discord.settings import DiscordSettings, parse_guild_ids
from bot.config import ConfigError, Settings, read_settings


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("", ()),
        (" , ,", ()),
        ("123", ("123",)),
        (" 1 , 22,333 ", ("1", "22", "333")),
        ("123,,456,", ("123", "456")),
        (str(2**64 - 1), (str(2**64 - 1),)),
    ],
)
def test_guild_ids_are_parsed(text: str, ids: tuple[str, ...]) -> None:
    assert parse_guild_ids(text) == ids


@pytest.mark.parametrize(
    "text",
    [
        "abc",
        "12a",
        "-1",
        "+1",
        "1.5",
        "1 2",
        "²",  # a digit to str.isdigit, not to int()
        "١٢٣",  # Arabic-Indic digits: int() takes them, no snowflake has them
        str(2**64),  # past a snowflake's 64 bits
        "*",  # every guild: only where allowed
        "123,*",
    ],
)
def test_what_is_not_a_guild_id_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="guild ids"):
        parse_guild_ids(text)


def test_every_guild_only_where_allowed() -> None:
    assert parse_guild_ids("*", allow_all=True) == ("*",)
    assert parse_guild_ids("1, *", allow_all=True) == ("1", "*")
    with pytest.raises(ValueError, match=r"or \*"):
        parse_guild_ids("x", allow_all=True)


def test_settings_and_config_apply_the_same_rule() -> None:
    def settings(**values: str) -> DiscordSettings:
        return read_settings(DiscordSettings, _env_file=None, **values)

    with pytest.raises(ConfigError, match=r"^DISCORD_COMMAND_GUILDS is invalid"):
        settings(discord_command_guilds="*")  # commands sync to named guilds only
    with pytest.raises(ConfigError, match=r"^DISCORD_THREAD_GUILDS is invalid"):
        settings(discord_thread_guilds="²")
    own = settings(discord_token="t", discord_command_guilds=" 1, 2 ", discord_thread_guilds="3,*")
    config = DiscordConfig.from_settings(Settings(_env_file=None), own)  # type: ignore[call-arg]
    assert config.command_guilds == (1, 2)
    assert config.thread_everywhere and config.thread_guilds == frozenset({"3"})

    class Unchecked:  # an object that skipped the settings check is held to the same rule
        discord_token = own.discord_token
        discord_api_url = own.discord_api_url
        discord_gateway_url = None
        discord_command_guilds = "*"
        discord_shard_count = None
        discord_thread_guilds = ""
        discord_allow_bots = False

    with pytest.raises(DiscordConfigError, match=r"^DISCORD_COMMAND_GUILDS must be"):
        DiscordConfig.from_settings(Settings(_env_file=None), Unchecked())  # type: ignore[call-arg]
