"""The long-term memory index: what was said in past conversations, kept for retrieval.

An entry is a conversation excerpt, a session summary or a consolidated memory. Each carries its
scope (team, the place it was said in, whether that place is private, the people who took part),
the ids of its source messages, its date and kind, its text and, when an embedder is configured,
its vector (tagged with the embedder's name, so vectors of two models are never compared).

Two backends (`bot.stores.index_sqlite`, `bot.stores.index_mongo`) pass one contract suite
(`tests/stores/test_memory_index_contract.py`). The index stores and filters; ranking (BM25 +
dense + fusion) happens in `bot.memory.episodic`, over the entries a scope may see: the scope
filter is applied by the query, before anything is ranked.

Reads are incremental: `changes(scope, after=cursor)` returns the scope's entries written or
re-embedded since `cursor` plus the team's deletion generation, so a reader can keep a per-scope
cache and pay one round trip per turn whatever the size of the scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from pydantic import Field

from bot.keys import PersonKey, TeamKey
from bot.stores.records import _Record, utcnow

EntryKind = Literal["excerpt", "summary", "memory"]


class MemoryEntry(_Record):
    """One retrievable memory. `id` is chosen by the writer and deterministic (the same source
    indexed twice gives the same id), which is what makes indexing idempotent."""

    id: str
    kind: EntryKind = "excerpt"
    team: str  # TeamKey.id
    place: str  # platform:team:channel — a channel and all its threads, or one DM
    session: str  # SessionKey.id it came from ("" for memories that span sessions)
    private: bool = False  # a private channel, group DM or DM: never used outside `place`
    # Who could read its sources (`bot.audience` id, the narrowest of them); "" for entries
    # written before the audience rule, until the start-up migration settles it from them.
    audience: str = ""
    people: list[str] = Field(default_factory=list)  # PersonKey.ids of those who posted
    source_ids: list[str] = Field(default_factory=list)  # "<session id>#<seq>" of the messages
    text: str
    # Words around the entry (the message it answers), matched with it but not part of what it
    # says: a reply like "Yes, in May!" is found through the question it answers.
    context: str = ""
    occurred_at: datetime = Field(default_factory=utcnow)  # when it was said
    created_at: datetime = Field(default_factory=utcnow)
    embedder: str | None = None
    vector: list[float] | None = Field(default=None, repr=False)
    stamp: int = 0  # change stamp assigned by the index (insert or re-embed); readers' cursor


@dataclass(frozen=True, slots=True)
class MemoryScope:
    """Which entries one reply may use: those said in `places` (all their threads), plus, when
    `person` is set (a DM with that person), the non-private entries of the conversations
    (sessions) that person took part in, and those drawn from them (`people`).
    Always within one team of one platform."""

    team: TeamKey
    places: tuple[str, ...] = ()
    person: PersonKey | None = None

    def __post_init__(self) -> None:
        prefix = self.team.id + ":"
        for place in self.places:
            if not isinstance(place, str) or not place.startswith(prefix) or place == prefix:
                raise ValueError(f"place {place!r} is not in team {self.team.id}")
        if self.person is not None and self.person.team_key != self.team:
            raise ValueError(f"person {self.person.id} is not in team {self.team.id}")
        if not self.places and self.person is None:
            raise ValueError("a memory scope needs a place or a person")

    @property
    def key(self) -> str:
        """A stable string naming the scope (cache key)."""
        person = self.person.id if self.person else "-"
        return f"{self.team.id}|{','.join(sorted(self.places))}|{person}"


@dataclass
class IndexChanges:
    """Entries of a scope with a stamp above the cursor, the new cursor, and the team's
    generation (bumped by every deletion: a reader whose cached generation differs reloads)."""

    entries: list[MemoryEntry] = field(default_factory=list)
    cursor: int = 0
    generation: int = 0


def place_id(platform: str, team: str, channel: str) -> str:
    """The place of a channel (all its threads) or of a DM."""
    return f"{platform}:{team}:{channel}"


def check_entry(entry: MemoryEntry) -> None:
    """ValueError for an entry that could widen a query: empty ids, or a place/person outside
    its team."""
    if not entry.id.strip() or not entry.team.strip() or not entry.text.strip():
        raise ValueError("a memory entry needs an id, a team and some text")
    if not entry.place.startswith(entry.team + ":") or entry.place == entry.team + ":":
        raise ValueError(f"entry place {entry.place!r} is not in team {entry.team!r}")
    for person in entry.people:
        if not person.startswith(entry.team + ":"):
            raise ValueError(f"entry person {person!r} is not in team {entry.team!r}")
    if (entry.vector is None) != (entry.embedder is None):
        raise ValueError("an entry's vector and embedder name go together")


class MemoryIndex(Protocol):
    async def add(self, entries: Sequence[MemoryEntry]) -> int:
        """Insert entries; an id already stored is left as it is (never indexed twice).
        Returns how many were new. ValueError (see `check_entry`) before writing anything."""

    async def add_participants(self, team: TeamKey, session_id: str, people: Sequence[str]) -> None:
        """These people took part in (posted in) this session: a DM with any of them may use
        the session's non-private entries, past and future. Idempotent."""

    async def changes(self, scope: MemoryScope, *, after: int = 0) -> IndexChanges:
        """The scope's entries with stamp > after (oldest stamp first), in one round trip.
        A backend may hand out some entries at or below `after` again (readers merge by id and
        stamp); it never leaves out one above it."""

    async def get(self, team: TeamKey, ids: Sequence[str]) -> list[MemoryEntry]:
        """Entries of this team by id (missing ids are skipped)."""

    async def set_vectors(
        self, team: TeamKey, embedder: str, vectors: dict[str, list[float]]
    ) -> int:
        """Store vectors made by `embedder` (replacing any other model's); re-stamps the
        entries so readers pick them up. Returns how many entries were updated."""

    async def missing_vectors(self, embedder: str, *, limit: int) -> list[MemoryEntry]:
        """Entries (any team) without a vector from `embedder`, for background (re-)embedding."""

    async def delete_entries(self, team: TeamKey, ids: Sequence[str]) -> int: ...

    async def entries_of_person(self, person: PersonKey) -> list[MemoryEntry]:
        """Every entry drawn from this person's words (`people`), for erasure."""

    async def delete_person(self, person: PersonKey) -> int:
        """Delete every entry drawn from this person (`people`) and forget them as a
        participant; returns the count of entries deleted."""

    async def get_checkpoint(self, session_id: str) -> int:
        """The highest message seq of a session already indexed (0 if none)."""

    async def set_checkpoint(self, session_id: str, seq: int) -> None:
        """Advance a session's indexing checkpoint (never moves it backwards)."""

    async def checkpoints(self) -> dict[str, int]:
        """Every session's checkpoint (to find work left undone by a crash)."""

    async def ping(self) -> bool: ...

    async def compact(self) -> None:
        """Make deleted entries unrecoverable from files (SQLite); no-op elsewhere."""

    async def close(self) -> None: ...

    # --- erasure: copies of a person's words in other entries (bot.memory.erasure) ---------

    async def entries_of_team(
        self, team: TeamKey, *, without_audience: bool = False
    ) -> list[MemoryEntry]:
        """Every entry of the team (without vectors), oldest stamp first: erasure reads them
        to cut a forgotten person's words out of entries that quote them. `without_audience`:
        only those written before entries carried one (the start-up migration's)."""

    async def reset_session(self, team: TeamKey, session_id: str) -> int:
        """Delete the session's excerpt entries and move its indexing checkpoint back to 0, so
        the indexer makes them again from the messages as they now are (after an erasure cut
        words out of them). Consolidated memories are left. Returns the count deleted."""

    async def set_audiences(self, team: TeamKey, audiences: dict[str, str]) -> int:
        """Record these entries' audiences (id -> `bot.audience` id); an entry whose audience
        is not public becomes private (used only in its place). Readers reload (the team's
        generation is bumped). Returns how many entries were updated."""

    async def entries_from_sources(
        self, team: TeamKey, source_ids: Sequence[str]
    ) -> list[MemoryEntry]:
        """Entries of this team drawn from any of these messages (`source_ids`, each
        "<session id>#<seq>"), oldest stamp first: what a platform delete or edit remakes.
        An entry is looked for in the sessions the ids name, and among entries that span
        sessions (`session` ""): every writer draws an entry from its own session's messages."""
