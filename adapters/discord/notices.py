"""Admin notices (budget alerts) as a DM from the bot, mentioning nobody."""

from __future__ import annotations

import discord

from adapters.discord.config import MESSAGE_LIMIT
from bot.keys import PersonKey


class DiscordAdminNotice:
    def __init__(self, client: discord.Client) -> None:
        self.client = client

    async def tell(self, person: PersonKey, text: str) -> None:
        user_id = int(person.user)
        user = self.client.get_user(user_id) or await self.client.fetch_user(user_id)
        await user.send(text[:MESSAGE_LIMIT], allowed_mentions=discord.AllowedMentions.none())
