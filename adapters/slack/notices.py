"""Admin notices (budget alerts) as a DM from the app: `chat.postMessage` with the person's
user id as the channel opens the app's DM with them (Slack documents this for bot tokens)."""

from __future__ import annotations

from adapters.slack.handlers import ClientFor
from adapters.slack.mrkdwn import truncate
from bot.keys import PersonKey

MAX_NOTICE_CHARS = 3000


class SlackAdminNotice:
    def __init__(self, client_for: ClientFor) -> None:
        self.client_for = client_for

    async def tell(self, person: PersonKey, text: str) -> None:
        client = await self.client_for(person.team, None)
        if client is None:
            raise LookupError("no installation for this workspace")
        await client.chat_postMessage(
            channel=person.user, text=truncate(text, MAX_NOTICE_CHARS, marker=" …")
        )
