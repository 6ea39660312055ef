"""The memory index as a tier of long-term memory for the consolidation and the erasure.

- Consolidated episodic memories become index entries of kind "memory" (deterministic ids, so a
  resumed run never writes one twice), scoped like the messages they came from: the session's
  place, the people who posted in them, private when any of them was said in a private place.
- `/memory forget all` deletes every entry the person took part in, with its vector, after the
  indexing under way has written what it read (`settle`). Entries
  shared with others are dropped, not regenerated without them (a memory or excerpt mixes
  everyone's words and cannot be edited reliably); the others' messages stay in the store.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

from bot.audience import Audience
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.copies import WordCutter
from bot.memory.episodic.excerpts import entry_place
from bot.stores.memory_index import MemoryEntry, MemoryIndex, place_id
from bot.stores.records import PendingConsolidation, utcnow

log = logging.getLogger(__name__)

AddEntries = Callable[[Sequence[MemoryEntry]], Awaitable[int]]
Settle = Callable[[float], Awaitable[bool]]  # wait (at most so many seconds) for queued indexing
SETTLE_SECONDS = 10.0


class IndexMemories:
    """`MemorySink` (consolidation) and `MemoryTiers` (erasure) over one memory index."""

    def __init__(
        self,
        index: MemoryIndex,
        add: AddEntries | None = None,
        settle: Settle | None = None,
        reindex: Callable[[SessionKey], None] | None = None,
    ) -> None:
        self.index = index
        self.add = add or index.add  # the episodic indexer's add_entries embeds them first
        # The episodic indexer's `idle`: an indexing that read the person's messages before
        # the erasure deleted them writes its entries before they are erased, not after.
        self.settle = settle
        # The indexer's `enqueue`: a session whose entries were reset is indexed again (without
        # an indexer, the next start's recovery finds it: its checkpoint is back at 0).
        self.reindex = reindex

    async def write_memories(
        self, session: SessionKey, pending: PendingConsolidation, ids: list[str]
    ) -> int:
        entries = [
            MemoryEntry(
                id=entry_id,
                kind="memory",
                team=session.team_key.id,
                place=entry_place(
                    place_id(session.platform, session.team, session.channel),
                    memory.audience,
                    session.team_key.id,
                ),
                session=session.id,
                private=memory.private
                or bool(memory.audience and not Audience.parse(memory.audience).public),
                audience=memory.audience,
                people=memory.people,
                source_ids=memory.messages,
                text=memory.text,
                occurred_at=memory.occurred_at or utcnow(),
            )
            for entry_id, memory in zip(ids, pending.memories, strict=True)
        ]
        return await self.add(entries)

    async def erase_person(self, person: PersonKey) -> int:
        if self.settle is not None:
            await self.settle(SETTLE_SECONDS)
        return await self.index.delete_person(person)

    async def compact(self) -> None:
        await self.index.compact()

    async def cut_words(self, team: TeamKey, cutter: WordCutter, sessions: list[str]) -> int:
        """Excerpts of `sessions` (their messages changed) are made again from the messages as
        they now are; every other entry of the team that quotes the person (its text or its
        match-only context) is rewritten without the quotes and embedded again (its old vector
        was made from them). Returns the entries changed."""
        if self.settle is not None:
            await self.settle(SETTLE_SECONDS)
        changed = 0
        for session_id in sessions:
            changed += await self.index.reset_session(team, session_id)
            if self.reindex is not None:
                with contextlib.suppress(ValueError):
                    self.reindex(SessionKey.parse(session_id))
        reset = set(sessions)
        rewritten: list[MemoryEntry] = []
        for entry in await self.index.entries_of_team(team):
            if entry.kind == "excerpt" and entry.session in reset:
                continue  # deleted above, made again from the cut messages
            text, context = cutter.cut(entry.text), cutter.cut(entry.context)
            if text == entry.text and context == entry.context:
                continue
            rewritten.append(
                entry.model_copy(
                    update={"text": text, "context": context, "vector": None, "embedder": None}
                )
            )
        if rewritten:
            await self.index.delete_entries(team, [e.id for e in rewritten])
            await self.add([e for e in rewritten if e.text.strip(" []…\n")])
        return changed + len(rewritten)


class IndexHost(Protocol):
    """What `attach_memory_index` takes from the app (`bot.app.BotApp`; not imported here)."""

    @property
    def store(self) -> object: ...  # only says which backend runs (`open_memory_index`)

    def attach_memory_tier(self, tier: IndexMemories, index: MemoryIndex) -> None: ...


async def attach_memory_index(app: IndexHost, *, data_dir: Path) -> IndexMemories:
    """Open the index next to the store and make it a tier of the app's consolidation and
    erasure; `app.close()` closes it."""
    from bot.stores.index_factory import open_memory_index

    index = await open_memory_index(app.store, data_dir=data_dir)
    tier = IndexMemories(index)
    app.attach_memory_tier(tier, index)
    return tier
