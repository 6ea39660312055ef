"""Approvals on Discord (`bot.approvals`): the request as a message with three buttons, the
requester's click, and the periodic sweep.

A turn on Discord starts from a message (a mention, a reply, a DM, a thread), never from an
interaction, so there is no interaction to answer ephemerally: the request is a message in the
turn's own place (its thread, or the channel, or the DM) that pings the requester (and nobody
else) and carries Approve, Approve always and Deny. Anyone else's click gets an ephemeral
refusal; the requester's is acknowledged at once (a deferred update, type 6, well within
Discord's 3 seconds), decided through the core (the store's compare-and-set lets one decision
through: a double click or a replayed interaction does nothing more), then the message shows the
outcome and loses its buttons. A decision that completes the turn resumes it with a sink that
posts to the place the approval stored, so a click after a restart, or in another process,
works the same. The custom_ids are persistent (`ap:<choice>:<approval id>:<requester id>`): no
view state is kept in the process. The requester id in the custom_id only spares a store read
for a stranger's click; the store's record decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import discord

from adapters.common.logs import emit
from adapters.common.tasks import TaskTracker
from adapters.discord.approval_view import CHOICES, PREFIX
from adapters.discord.config import MESSAGE_LIMIT, DiscordConfig
from adapters.discord.rest_errors import REST_ERRORS, rest_error_fields
from adapters.discord.sink import DiscordReplySink
from bot.approvals.desk import Choice, Resume
from bot.core import BotCore, DecidesApprovals
from bot.keys import PersonKey, SessionKey

_LOG = logging.getLogger(__name__)
PLATFORM = "discord"
DM_TEAM = "@dm"
SWEEP_EVERY = 5.0  # seconds between checks for requests whose time ran out
NOT_YOURS = "Only the person who asked can approve or deny this."
MAX_CUSTOM_ID = 100


def parse(custom_id: str) -> tuple[Choice, str, str] | None:
    """(choice, approval id, requester id) of an approval button, None for anything else."""
    if not custom_id.startswith(PREFIX) or len(custom_id) > MAX_CUSTOM_ID:
        return None
    parts = custom_id[len(PREFIX) :].split(":")
    if len(parts) != 3 or parts[0] not in CHOICES or not parts[1] or not parts[2].isdigit():
        return None
    return CHOICES[parts[0]], parts[1], parts[2]


def _custom_id(interaction: discord.Interaction) -> str | None:
    if interaction.type is not discord.InteractionType.component:
        return None
    data: object = interaction.data
    custom_id = data.get("custom_id") if isinstance(data, dict) else None
    if not isinstance(custom_id, str) or not custom_id.startswith(PREFIX):
        return None
    return custom_id


class DiscordApprovals:
    """The clicks on approval buttons, the resumed turns and the sweep, for one client."""

    def __init__(
        self,
        core: BotCore,
        config: DiscordConfig,
        client: discord.Client,
        tasks: TaskTracker,
        slot: Callable[[], AbstractAsyncContextManager[None]],
    ) -> None:
        self.core = core
        self.config = config
        self.client = client
        self.tasks = tasks
        # The adapter's turn slot (load guard, turn-concurrency limit): a resumed turn is a turn
        # like any other, so it waits for one as a new message's turn does.
        self.slot = slot
        self._sweeper: asyncio.Task[None] | None = None

    # clicks ------------------------------------------------------------------------------------

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        custom_id = _custom_id(interaction)
        if custom_id is None:
            return
        parsed = parse(custom_id)
        clicker = str(interaction.user.id)
        none = discord.AllowedMentions.none()
        try:
            if (
                parsed is None
                or parsed[2] != clicker
                or not isinstance(self.core, DecidesApprovals)
            ):
                usable = parsed is not None and isinstance(self.core, DecidesApprovals)
                why = "not_requester" if usable else "unusable"
                emit(_LOG, "discord_approval_refused", logging.INFO, why=why)
                text = NOT_YOURS if usable else "That button isn't one I can use."
                await interaction.response.send_message(text, ephemeral=True, allowed_mentions=none)
                return
            await interaction.response.defer()  # type 6: the message is updated below
        except REST_ERRORS as exc:  # answered by another delivery of the same click
            emit(_LOG, "discord_approval_reply_failed", logging.WARNING, **rest_error_fields(exc))
            return
        choice, approval_id, _ = parsed
        team = str(interaction.guild_id) if interaction.guild_id else DM_TEAM
        person = PersonKey(PLATFORM, team, clicker)
        session = SessionKey(PLATFORM, team, str(interaction.channel_id or 0), None)
        answer = await self.core.decide_approval(person, choice, approval_id, session)
        emit(_LOG, "discord_approval_answered", ok=answer.ok, resumes=answer.resume is not None)
        try:
            message = interaction.message
            if answer.ok or answer.resume is not None:  # decided by this click
                before = message.content if message is not None else ""
                outcome = f"{before}\n\n**{answer.text}**"[:MESSAGE_LIMIT]
                await interaction.edit_original_response(
                    content=outcome, view=None, allowed_mentions=none
                )
            else:
                await interaction.followup.send(answer.text, ephemeral=True, allowed_mentions=none)
        except REST_ERRORS as exc:
            emit(_LOG, "discord_approval_reply_failed", logging.WARNING, **rest_error_fields(exc))
        if answer.resume is not None:
            self.resume(answer.resume)

    # resumed turns ------------------------------------------------------------------------------

    def resume(self, resume: Resume) -> None:
        """Go on with the turn in the background, posting to the place it was asked in."""
        with contextlib.suppress(RuntimeError):  # shutting down: the sweep picks it up later
            self.tasks.spawn(self._resume(resume), name="discord-approval-resume")

    async def _resume(self, resume: Resume) -> None:
        assert isinstance(self.core, DecidesApprovals)
        msg = resume.message
        where = int(msg.thread or msg.channel)
        try:
            target = self.client.get_channel(where) or await self.client.fetch_channel(where)
        except REST_ERRORS as exc:
            emit(_LOG, "discord_approval_place_gone", logging.WARNING, **rest_error_fields(exc))
            return
        if not isinstance(target, discord.abc.Messageable):
            return
        sink = DiscordReplySink(
            target=target,
            config=self.config,
            allowed_mentions=discord.AllowedMentions.none(),
            nonce_seed=f"{resume.turn_id}:resumed:{resume.decided[0].id if resume.decided else ''}",
        )
        async with self.slot():
            await self.core.resume_turn(resume, sink)

    # the sweep ----------------------------------------------------------------------------------

    def start(self) -> None:
        if isinstance(self.core, DecidesApprovals) and self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="discord-approval-sweep")

    async def stop(self) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper

    async def _sweep(self) -> None:
        """Requests whose time ran out are told to the model (it answers in their place), and
        decided turns whose process died before resuming are picked up."""
        assert isinstance(self.core, DecidesApprovals)
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            for resume in await self.core.sweep_approvals():
                self.resume(resume)
