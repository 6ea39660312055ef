"""The sign-in in chat: a `<name>_connect` tool when the person has not connected an
`auth=user` server, the link sent privately, and the callback that ends it.

The model sees, for each such server the speaker has not connected, one tool: "connect your
account to N". Calling it is how a turn says it needs the server: the bot then sends the
person a private message (a DM on Slack and Discord, a line on the console: the adapter's
`AdminNotice`) with the sign-in link, and the model tells them to use it. The turn's inbox
item is kept with the sign-in (sealed, and erased with the person), and when `GET
/oauth/callback` completes the sign-in the same item is put back into the durable inbox: the
question is answered again, now with the person's own tools, without them asking again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from bot.connections.base import AFTER_SIGN_IN, Owner
from bot.connections.person_tools import PersonTools, session_key
from bot.connections.signin import STATE_TTL, ServerAuth, SignInFailed, SignIns, state_hash
from bot.inbox import CURRENT_ITEM
from bot.keys import PersonKey
from bot.stores.inbox import InboxItem
from tools.declare import Tool, declare
from tools.types import ToolContext

if TYPE_CHECKING:
    from bot.core import AdminNotice
    from bot.inbox import InboxWorker

log = logging.getLogger("bot.connections")

LINK_SENT = (
    "A private message with a link to connect `{name}` was sent to the user. Tell them, in "
    "one short sentence, to open it; their question will be answered once they have "
    "connected. Do not guess what the tools would have said."
)
LINK_TEXT = (
    "To let me use `{name}` with your own account, connect it here (the link works once, "
    "for {minutes} minutes): {url}"
)
MAX_QUERY_CHARS = 4096


class ChatSignIn:
    """Per-person sign-ins as the chat sees them (built when BOT_PUBLIC_URL is set)."""

    def __init__(self, signins: SignIns, people: PersonTools) -> None:
        self.signins, self.people = signins, people
        self.notice: AdminNotice | None = None  # the adapter's private channel to a person
        self.inbox: InboxWorker | None = None  # where a waiting question is put back

    def connect_tool(self, team: str, install: str, name: str, server: ServerAuth) -> Tool:
        async def connect(ctx: ToolContext) -> str:
            return await self._send_link(PersonKey.parse(ctx.speaker_id), team, name, server)

        return declare(
            connect,
            name=f"{name}_connect",
            description=(
                f"The `{name}` tools act with the user's own account, which they have not "
                f"connected yet. Call this when the request needs `{name}`: it sends the user "
                "a private sign-in link."
            ),
        )

    async def _send_link(self, person: PersonKey, team: str, name: str, server: ServerAuth) -> str:
        if person.team_key.id != team:
            return "Only people of this workspace can connect its tools."
        item = CURRENT_ITEM.get()
        waiting = (
            {"kind": item.kind, "session": item.session, "body": item.body}
            if item is not None
            else {}
        )
        try:
            started = await self.signins.start(Owner(team, person.id, name), server, waiting)
        except SignInFailed as exc:
            return f"Connecting `{name}` is not possible right now: {exc}."
        if self.notice is None:
            return f"I cannot send the user a private link to connect `{name}` here."
        text = LINK_TEXT.format(name=name, minutes=int(STATE_TTL // 60), url=started.link)
        try:
            await self.notice.tell(person, text)
        except Exception as exc:
            log.warning("signin_link_not_sent", extra={"fields": {"error": type(exc).__name__}})
            return f"The private link to connect `{name}` could not be sent; try again later."
        log.info("signin_link_sent", extra={"fields": {"team": team, "server": name}})
        return LINK_SENT.format(name=name)

    async def open_link(self, query: Mapping[str, str]) -> tuple[str | None, str]:
        """`GET /oauth/start`: (where to redirect, or None and what the page says)."""
        try:
            return await self.signins.open_link(query.get("s") or ""), ""
        except SignInFailed as exc:
            return None, f"Not connected: {exc}."

    async def finish(self, query: Mapping[str, str]) -> tuple[bool, str]:
        """`GET /oauth/callback`: (connected?, what the page says)."""
        if sum(len(k) + len(v) for k, v in query.items()) > MAX_QUERY_CHARS:
            return False, "This sign-in answer is too large."
        try:
            done = await self.signins.finish(query)
        except SignInFailed as exc:
            return False, f"Not connected: {exc}."
        owner = done.owner
        install = f"{owner.server}@{owner.team}"  # ToolboxFactory.provider's key
        await self.people.pool.forget(session_key(install, owner.person))
        waiting = done.waiting
        if waiting and self.inbox is not None:
            try:
                await self.inbox.put(
                    InboxItem(
                        kind=str(waiting["kind"]),
                        session=str(waiting["session"]),
                        body={**dict(waiting["body"]), AFTER_SIGN_IN: True},
                        dedup=(f"signin:{state_hash(query.get('state') or '')}",),
                    )
                )
            except Exception as exc:
                why = {"error": type(exc).__name__}
                log.warning("signin_resume_failed", extra={"fields": why})
                return True, f"Connected to {owner.server}. Ask your question again in the chat."
            return (
                True,
                f"Connected to {owner.server}. Your question is being answered in the chat.",
            )
        return True, f"Connected to {owner.server}. You can close this page."
