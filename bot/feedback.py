"""Thumbs up/down on the bot's final replies: what a reply's buttons carry and what a click does.

A final reply's buttons carry a short token (`ReplyRef.token`, at most 100 characters, so it
fits Discord's `custom_id`): the vote, the turn id, the seq of the person's message it answered
and the place's channel and thread. The team comes from the platform's own payload, never from
the token, and a click counts only if that turn is stored in that place (`FeedbackDesk.click`):
a token copied into another team, a reply that was erased or a made-up one is refused politely.
Nothing is written per turn; one small store write per click (`bot.stores.feedback`).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from bot.audience import META_AUDIENCE, UNKNOWN_FACT
from bot.keys import PersonKey, SessionKey
from bot.messages import MessageRef
from bot.metrics import FEEDBACK_VOTES
from bot.stores.feedback import DOWN, UP, FeedbackStore, Vote
from bot.stores.protocols import ConversationStore, StoreUnavailable

log = logging.getLogger(__name__)

MAX_TOKEN_CHARS = 100  # Discord's custom_id limit
TURN_SPAN = 100  # messages after the person's one searched for the turn's reply
META_MODEL = "model"  # key of the final reply's `meta` naming the model that wrote it
_TOKEN = re.compile(r"fb:([ud]):(t_[0-9a-f]{1,32}):([0-9]{1,12}):([^:\s]{1,32}):([^:\s]{1,32})")

THANKS = {UP: "Thanks for the feedback! :+1:", DOWN: "Thanks for the feedback! :-1:"}
CHANGED = {UP: "Changed your vote to :+1:.", DOWN: "Changed your vote to :-1:."}
NOT_MINE = "That button isn't one I can use any more."
GONE = "I can't find that reply any more (it may have been deleted or forgotten)."
DOWN_STORE = "I couldn't save that vote just now; please try again in a minute."
NO_FEEDBACK = "Feedback isn't kept here."


@dataclass(frozen=True, slots=True)
class ReplyRef:
    """The turn a final reply ends: what its feedback buttons point at."""

    session: SessionKey
    turn_id: str
    seq: int  # of the person's message the reply answered

    def token(self, vote: int) -> str:
        thread = self.session.thread or "-"
        mark = "u" if vote == UP else "d"
        return f"fb:{mark}:{self.turn_id}:{self.seq}:{self.session.channel}:{thread}"


@dataclass(frozen=True, slots=True)
class Token:
    vote: int
    turn_id: str
    seq: int
    channel: str
    thread: str | None


def parse_token(token: object) -> Token | None:
    """The token of a feedback button, or None for anything else (any length, any type)."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        return None
    m = _TOKEN.fullmatch(token)
    if m is None:
        return None
    mark, turn_id, seq, channel, thread = m.groups()
    value = UP if mark == "u" else DOWN
    return Token(value, turn_id, int(seq), channel, None if thread == "-" else thread)


@dataclass(frozen=True, slots=True)
class FeedbackClick:
    """A person pressed a feedback button (or typed `/good`, `/bad`), as the adapter saw it:
    `team` and `user` from the platform's payload, `where` the channel (or thread) of the
    clicked message, `reply_id` its platform message id, `token` the button's own value."""

    platform: str
    team: str
    user: str
    where: str
    reply_id: str
    token: str


@dataclass(frozen=True, slots=True)
class FeedbackAnswer:
    text: str  # one line for the person (ephemeral where the platform allows)
    ok: bool = True
    vote: int = 0  # the vote stored (0: none)


def offer_feedback(sink: object, ref: ReplyRef) -> None:
    """Hand the reply's turn to a sink that shows feedback buttons: such a sink has
    `rate_with(ref)`, called just before `finish` for a reply that answered (never for an
    apology); other sinks are left as they are."""
    rate_with = getattr(sink, "rate_with", None)
    if callable(rate_with):
        rate_with(ref)


class FeedbackDesk:
    """Checks a click against the stored turn and keeps the vote."""

    def __init__(
        self, votes: FeedbackStore, conversations: ConversationStore, *, default_model: str
    ) -> None:
        self.votes = votes
        self.conversations = conversations
        self.default_model = default_model

    async def click(self, click: FeedbackClick) -> FeedbackAnswer:
        token = parse_token(click.token)
        if token is None or click.where not in (token.channel, token.thread):
            return self._refuse(click, "token", NOT_MINE)
        try:
            session = SessionKey(click.platform, click.team, token.channel, token.thread)
            person = PersonKey(click.platform, click.team, click.user)
        except ValueError:
            return self._refuse(click, "place", NOT_MINE)
        try:
            turn = await self.conversations.between(
                session, after_seq=token.seq - 1, upto_seq=token.seq + TURN_SPAN
            )
        except StoreUnavailable:
            return self._refuse(click, "store", DOWN_STORE)
        asked = [m for m in turn if m.seq == token.seq and m.turn_id == token.turn_id]
        if not asked or asked[0].role != "user":
            return self._refuse(click, "unknown_turn", GONE)
        replies = [
            m
            for m in turn
            if m.turn_id == token.turn_id and m.role == "assistant" and not m.tool_calls
        ]
        model = str(replies[-1].meta.get(META_MODEL) or "") if replies else ""
        audience = asked[0].meta.get(META_AUDIENCE)
        vote = Vote(
            platform=click.platform,
            team=session.team_key.id,
            channel=token.channel,
            thread=token.thread or "",
            reply_id=click.reply_id[:200],
            person=person.id,
            vote=token.vote,
            at=time.time(),
            model=(model or self.default_model)[:200],
            session=session.id,
            turn_id=token.turn_id,
            seq=token.seq,
            audience=(audience if isinstance(audience, str) else UNKNOWN_FACT)[:300],
        )
        try:
            before = await self.votes.cast(vote)
        except ValueError:
            return self._refuse(click, "bounds", NOT_MINE)
        except StoreUnavailable:
            return self._refuse(click, "store", DOWN_STORE)
        FEEDBACK_VOTES.labels(click.platform, "up" if token.vote == UP else "down").inc()
        log.info(
            "feedback_vote",
            extra={
                "fields": {
                    "platform": click.platform,
                    "team": click.team,
                    "turn_id": token.turn_id,
                    "vote": token.vote,
                    "changed": before not in (None, token.vote),
                }
            },
        )
        changed = before is not None and before != token.vote
        text = CHANGED[token.vote] if changed else THANKS[token.vote]
        return FeedbackAnswer(text, vote=token.vote)

    def _refuse(self, click: FeedbackClick, reason: str, text: str) -> FeedbackAnswer:
        log.info(
            "feedback_refused",
            extra={"fields": {"platform": click.platform[:20], "reason": reason}},
        )
        return FeedbackAnswer(text, ok=False)


async def vote(core: object, click: FeedbackClick) -> FeedbackAnswer:
    """`core.feedback(click)` when the core keeps feedback (adapters' one call); never raises."""
    handle = getattr(core, "feedback", None)
    if not callable(handle):
        return FeedbackAnswer(NO_FEEDBACK, ok=False)
    try:
        answer = await handle(click)
    except Exception:
        log.exception("feedback_failed")
        return FeedbackAnswer(DOWN_STORE, ok=False)
    return answer if isinstance(answer, FeedbackAnswer) else FeedbackAnswer(NO_FEEDBACK, ok=False)


async def reply_deleted(core: object, ref: MessageRef) -> None:
    """The platform deleted messages of the bot: the votes on them go, when the core keeps
    feedback (`BotApp.reply_deleted`). Never raises."""
    drop = getattr(core, "reply_deleted", None)
    if callable(drop):
        try:
            await drop(ref)
        except Exception:
            log.exception("feedback_drop_failed")
