"""Feedback on the bot's final replies (thumbs up/down): what is stored, and the protocol both
backends implement.

One vote per person per reply (keyed by team, the reply's platform message id and the person):
voting again replaces it, so a vote can change and change back. A vote carries what finds the
answer again with its context (the session key, the turn id and the seq of the message the reply
answered, the model) and the audience of its place, so a later report can keep private places
apart. The reply's words are not copied: the turn in the conversation store holds them.

Privacy: a vote names its voter, so `/memory forget all` deletes that person's votes
(`FeedbackVoters`, an erasure tier) and a platform delete of the reply deletes its votes.

Bounds: text fields are capped (`check_vote`), and at most `VOTES_KEPT` votes are kept per team
(the oldest dropped first), so a flood of clicks cannot grow the store without end.

For reports (`/usage`, `bot usage`): `feedback_totals(team, since)` -> `FeedbackTotals`, the up
and down counts per place (channel), per model and per person (PersonKey ids; show those to
admins only), counting the votes cast or last changed at or after `since` (epoch seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bot.keys import PersonKey, TeamKey

VOTES_KEPT = 100_000  # per team, oldest dropped first
# The bound is enforced on a process's first vote and about every TRIM_EVERY-th after it
# (a scan of the team's newest VOTES_KEPT votes costs more than the vote itself), so a team
# may hold up to about TRIM_EVERY more votes per process for a while.
TRIM_EVERY = 100
MAX_ID_CHARS = 200  # ids: team, channel, thread, reply, person, session, turn
MAX_MODEL_CHARS = 200
MAX_AUDIENCE_CHARS = 300
UP, DOWN = 1, -1


@dataclass(frozen=True, slots=True)
class Vote:
    platform: str
    team: str  # TeamKey.id
    channel: str
    thread: str  # "" when the reply is not in a thread
    reply_id: str  # the platform message id of the reply (Slack ts, Discord message id)
    person: str  # PersonKey.id of the voter
    vote: int  # UP or DOWN
    at: float  # epoch seconds of the vote (the last change)
    model: str  # the model that wrote the reply ("" unknown)
    session: str  # SessionKey.id of the conversation
    turn_id: str  # the turn that wrote the reply
    seq: int  # seq of the person's message the reply answered (0 unknown)
    audience: str  # `bot.audience` id of the place


def check_vote(vote: Vote) -> None:
    """The store's own bounds: ValueError past them (the caller checked the meaning)."""
    if vote.vote not in (UP, DOWN):
        raise ValueError("a vote is +1 or -1")
    ids = (vote.platform, vote.team, vote.channel, vote.reply_id, vote.person)
    if not all(ids):
        raise ValueError("a vote names its platform, team, channel, reply and person")
    for value in (*ids, vote.thread, vote.session, vote.turn_id):
        if len(value) > MAX_ID_CHARS:
            raise ValueError(f"an id of a vote is at most {MAX_ID_CHARS} characters")
    if len(vote.model) > MAX_MODEL_CHARS or len(vote.audience) > MAX_AUDIENCE_CHARS:
        raise ValueError("a vote's model or audience is too long")
    if not 0 <= vote.seq < 2**62:
        raise ValueError("a vote's seq is out of range")


@dataclass(frozen=True, slots=True)
class Tally:
    up: int = 0
    down: int = 0

    def add(self, vote: int, n: int = 1) -> Tally:
        return Tally(self.up + n, self.down) if vote == UP else Tally(self.up, self.down + n)


@dataclass(frozen=True, slots=True)
class FeedbackTotals:
    """Votes of one team since a time. `by_person` names people (PersonKey ids): for admins and
    operators only. Keys sorted; a key with no votes is absent."""

    total: Tally = Tally()
    by_place: dict[str, Tally] = field(default_factory=dict)  # channel id -> counts
    by_model: dict[str, Tally] = field(default_factory=dict)  # model ("" unknown) -> counts
    by_person: dict[str, Tally] = field(default_factory=dict)  # PersonKey.id -> counts


def totals_of(rows: Sequence[tuple[str, str, str, int, int]]) -> FeedbackTotals:
    """Fold (channel, model, person, vote, count) rows, as both backends group them."""
    total = Tally()
    places: dict[str, Tally] = {}
    models: dict[str, Tally] = {}
    people: dict[str, Tally] = {}
    for channel, model, person, vote, n in rows:
        total = total.add(vote, n)
        places[channel] = places.get(channel, Tally()).add(vote, n)
        models[model] = models.get(model, Tally()).add(vote, n)
        people[person] = people.get(person, Tally()).add(vote, n)
    return FeedbackTotals(
        total=total,
        by_place=dict(sorted(places.items())),
        by_model=dict(sorted(models.items())),
        by_person=dict(sorted(people.items())),
    )


class FeedbackStore(Protocol):
    async def cast(self, vote: Vote) -> int | None:
        """Store this vote, replacing the person's earlier vote on the same reply; returns that
        earlier vote (None: the first). ValueError past the bounds (`check_vote`)."""

    async def votes_on(self, team: TeamKey, reply_id: str) -> list[Vote]:
        """The votes on one reply, oldest first."""

    async def feedback_totals(self, team: TeamKey, since: float = 0.0) -> FeedbackTotals:
        """Up/down counts of the team's votes cast (or last changed) at or after `since`."""

    async def forget_voter(self, person: PersonKey) -> int:
        """Delete every vote of this person; returns how many."""

    async def drop_replies(self, team: TeamKey, reply_ids: Sequence[str]) -> int:
        """Delete the votes on these replies (the platform deleted them); returns how many."""


def feedback_of(
    store: object, *, keep: int = VOTES_KEPT, trim_every: int = TRIM_EVERY
) -> FeedbackStore | None:
    """The feedback store on the same connection as a durable store, or None for a store that
    keeps none (then replies carry no buttons)."""
    from bot.stores.mongo import MongoStore
    from bot.stores.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        from bot.stores.feedback_sqlite import SqliteFeedback

        return SqliteFeedback(store.worker, keep=keep, trim_every=trim_every)
    if isinstance(store, MongoStore):
        from bot.stores.feedback_mongo import MongoFeedback

        return MongoFeedback(store.db, keep=keep, trim_every=trim_every)
    return None


class FeedbackVoters:
    """An erasure tier (`bot.memory.erasure.MemoryTiers`): `/memory forget all` deletes the
    person's votes. Votes are not memories, so it counts none."""

    def __init__(self, store: FeedbackStore) -> None:
        self.store = store

    async def erase_person(self, person: PersonKey) -> int:
        await self.store.forget_voter(person)
        return 0

    async def compact(self) -> None:
        """The main store's compaction covers it (same file / database)."""
