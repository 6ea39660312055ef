"""Feedback on final replies in Discord: two buttons (an action row of two type-2 buttons) on
the reply's last message, and the message-component interactions a click sends.

A button's `custom_id` is the core's token (`bot.feedback.ReplyRef.token`, at most 100
characters); the guild, person, channel and message come from the interaction. The answer is
ephemeral (flag 64) and comes within Discord's 3-second window: the vote (one store write)
gets 2 seconds, past that the interaction is deferred and the answer follows. A vote from
another guild, or for a message the bot does not know, gets a polite refusal; an interaction
that is not one of these buttons is left alone.
"""

from __future__ import annotations

import asyncio
import logging

import discord

from adapters.common.logs import emit
from adapters.discord.rest_errors import REST_ERRORS, rest_error_fields
from bot import feedback
from bot.core import BotCore
from bot.feedback import FeedbackAnswer, FeedbackClick, ReplyRef
from bot.stores.feedback import DOWN, UP

_LOG = logging.getLogger(__name__)
PLATFORM = "discord"
DM_TEAM = "@dm"  # the team of a DM (adapters.discord.handlers.DM_TEAM)
PREFIX = "fb:"  # the custom_id of a feedback button starts with it
ANSWER_WITHIN = 2.0  # seconds the vote may take before the interaction is deferred


def feedback_view(ref: ReplyRef) -> discord.ui.View:
    """The two buttons, as a view discord.py renders to components. Stopped before it is
    sent, so discord.py keeps no state per reply (the clicks arrive as `on_interaction`)."""
    view = discord.ui.View(timeout=None)
    for vote, emoji, label in ((UP, "👍", "Helpful"), (DOWN, "👎", "Not helpful")):
        view.add_item(
            discord.ui.Button(
                style=discord.ButtonStyle.secondary,
                emoji=emoji,
                label=label,
                custom_id=ref.token(vote),
            )
        )
    view.stop()
    return view


def custom_id_of(interaction: discord.Interaction) -> str | None:
    """The custom_id of a feedback button click, or None for any other interaction."""
    if interaction.type is not discord.InteractionType.component:
        return None
    data: object = interaction.data
    custom_id = data.get("custom_id") if isinstance(data, dict) else None
    if not isinstance(custom_id, str) or not custom_id.startswith(PREFIX):
        return None
    return custom_id


class DiscordFeedback:
    def __init__(self, core: BotCore) -> None:
        self.core = core

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        custom_id = custom_id_of(interaction)
        if custom_id is None:
            return
        message = interaction.message
        if message is None or interaction.channel_id is None:
            emit(_LOG, "discord_feedback_dropped", reason="no_message")
            return
        click = FeedbackClick(
            platform=PLATFORM,
            team=str(interaction.guild_id) if interaction.guild_id else DM_TEAM,
            user=str(interaction.user.id),
            where=str(interaction.channel_id),
            reply_id=str(message.id),
            token=custom_id,
        )
        vote = asyncio.ensure_future(feedback.vote(self.core, click))
        done, _ = await asyncio.wait({vote}, timeout=ANSWER_WITHIN)
        none = discord.AllowedMentions.none()
        try:
            if done:
                answer = vote.result()
                await interaction.response.send_message(
                    answer.text, ephemeral=True, allowed_mentions=none
                )
            else:  # a slow store: acknowledged now, answered when the vote is kept
                await interaction.response.defer(ephemeral=True, thinking=True)
                answer = await vote
                await interaction.followup.send(answer.text, ephemeral=True, allowed_mentions=none)
        except REST_ERRORS as exc:  # answered too late, or twice (a replayed interaction)
            emit(_LOG, "discord_feedback_reply_failed", logging.WARNING, **rest_error_fields(exc))
            return
        _answered(answer)


def _answered(answer: FeedbackAnswer) -> None:
    emit(_LOG, "discord_feedback_answered", ok=answer.ok, vote=answer.vote)
