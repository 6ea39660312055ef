"""Episodic memory for the turn: one object the app owns (index, indexer, retriever, embedder).

- `recall(msg, history, tokens)`: memories for this message, within its scope (see
  `scope_for`), rendered as one block of at most `tokens` tokens, or "" when nothing relevant.
  Never fails the turn: an unreachable index or embedder means no memories this time.
- `after_turn(session)`: queue the session's new messages for indexing (background).
- `start()`: index what a crash left unindexed and (re-)embed entries lacking vectors of the
  current embedder, in the background.

The scope rule (one rule: a memory may be used only where everyone who will see the reply could
have seen its source):
- in a channel or any of its threads: memories said in that channel, whoever asks there;
- in a DM: memories from that DM, and from the conversations the person took part in (posted
  in) within the team, except private ones;
- a private channel, group DM or DM is a private place: its memories never leave it (its
  membership may change, and a DM reader may not be a member);
- nothing crosses teams or platforms (the index query is per team; a person key carries its
  platform and team).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from bot.embeddings.base import Embedder
from bot.embeddings.factory import open_embedder
from bot.keys import SessionKey
from bot.memory.episodic.audiences import settle_audiences
from bot.memory.episodic.indexer import Indexer
from bot.memory.episodic.retrieval import Retriever
from bot.memory.episodic.text import date_words
from bot.memory.render import RECALLED_IDS
from bot.messages import IncomingMessage
from bot.stores.index_factory import open_memory_index
from bot.stores.leases import new_holder
from bot.stores.memory_index import MemoryEntry, MemoryIndex, MemoryScope, place_id
from bot.stores.protocols import ConversationStore, LeaseStore, StoreUnavailable
from bot.stores.records import StoredMessage
from bot.tokens import TokenCounter
from bot.turn import Recalled

log = logging.getLogger(__name__)

# Recalled memories change every turn, so every token of them is outside the prompt-cache
# prefix: a small share keeps that prefix at 85 % or more of a long session's input
# (bench/bench_prompt_cache.py).
RECALL_SHARE = 0.02  # of BOT_CONTEXT_TOKENS reserved for recalled memories
MEMORY_TOKENS = 60  # most tokens of one recalled memory
MAX_RESULTS = 3
HEADER = "Memories from earlier conversations (dated; use if relevant, may be outdated):"


def scope_for(msg: IncomingMessage) -> MemoryScope:
    team = msg.session.team_key
    place = place_id(msg.platform, msg.team, msg.place_channel)
    if msg.is_dm:
        return MemoryScope(team, (place,), msg.person)
    return MemoryScope(team, (place,))


def render(entry_text: str) -> str:
    """An entry as one bullet: "- [date] Name: text / Bot: reply"."""
    date, _, rest = entry_text.partition("\n")
    return f"- [{date}] " + " / ".join(line.strip() for line in rest.splitlines() if line.strip())


def render_entry(entry: MemoryEntry) -> str:
    """An excerpt's text starts with its date line; a consolidated memory's does not, so its
    date is written in front (a memory without its date reads as if it were current)."""
    if entry.kind == "excerpt":
        return render(entry.text)
    return f"- [{date_words(entry.occurred_at)}] " + " ".join(entry.text.split())


CATCH_UP_LEASE = "episodic-catch-up"
CATCH_UP_TTL = 3600.0  # a holder that dies on this host frees it at once (leases.py)


class EpisodicMemory:
    def __init__(
        self,
        store: ConversationStore,
        index: MemoryIndex,
        embedder: Embedder | None,
        counter: TokenCounter,
        *,
        leases: LeaseStore | None = None,
    ) -> None:
        self.index = index
        self.embedder = embedder
        self.counter = counter
        self.leases = leases  # keeps the start-up catch-up to one process at a time
        self.indexer = Indexer(store, index, embedder)
        self.retriever = Retriever(index, embedder)
        self._background: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Catch up on indexing and embedding in the background."""
        task = asyncio.create_task(self._catch_up(), name="episodic-catch-up")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _catch_up(self) -> None:
        """Settle, recover and re-embed what earlier runs left: by one process at a time of
        those sharing the store (the workers of one host all start together; the others skip
        it, as the one that runs it covers every session)."""
        holder = new_holder()
        if self.leases is not None:
            try:
                lease = await self.leases.take_lease(CATCH_UP_LEASE, holder, CATCH_UP_TTL)
            except StoreUnavailable:
                log.warning("episodic_catch_up_unavailable")
                return
            if not lease.ours:
                log.info("episodic_catch_up_elsewhere", extra={"fields": {"holder": lease.holder}})
                return
        log.info("episodic_catch_up")
        try:
            await self._catch_up_here()
        finally:
            if self.leases is not None:
                with contextlib.suppress(Exception):
                    await self.leases.release_lease(CATCH_UP_LEASE, holder)

    async def _catch_up_here(self) -> None:
        try:
            await settle_audiences(self.indexer.store, self.index)
            await self.indexer.recover()
            await self.indexer.idle(hurry=False)  # the backlog yields to turns like any work
            await self.indexer.reembed()
        except StoreUnavailable:
            log.warning("episodic_catch_up_unavailable")
        except Exception:
            log.exception("episodic_catch_up_failed")

    def after_turn(self, session: SessionKey) -> None:
        self.indexer.enqueue(session)

    async def recall(
        self,
        msg: IncomingMessage,
        history: Sequence[StoredMessage],
        tokens: int,
    ) -> Recalled:
        if tokens <= 0:
            return Recalled()
        now = msg.sent_at or datetime.now(UTC)
        # Already in the context: the history's own messages, and memories recalled for them
        # (they stay in the history with their message).
        seen = {f"{m.session}#{m.seq}" for m in history}
        shown = {str(i) for m in history for i in (m.meta.get(RECALLED_IDS) or ())}
        try:
            hits = await self.retriever.search(
                scope_for(msg),
                msg.text,
                now=now,
                limit=MAX_RESULTS,
                exclude_sources=seen,
                exclude_ids=shown,
            )
        except StoreUnavailable:
            fields = {"session": msg.session.id}
            log.warning("episodic_recall_unavailable", extra={"fields": fields})
            return Recalled()
        except Exception:
            log.exception("episodic_recall_failed", extra={"fields": {"session": msg.session.id}})
            return Recalled()
        lines = [HEADER]
        people: list[str] = []
        ids: list[str] = []
        used = self.counter.count(HEADER) + 8
        for hit in hits:
            line = render_entry(hit.entry)
            if self.counter.count(line) > MEMORY_TOKENS:
                line = self.counter.truncate(line, MEMORY_TOKENS) + "…"
            cost = self.counter.count(line) + 1
            if used + cost > tokens:
                continue  # a shorter one further down may still fit
            lines.append(line)
            people.extend(p for p in hit.entry.people if p not in people)
            ids.append(hit.entry.id)
            used += cost
        if len(lines) == 1:
            return Recalled()
        return Recalled("\n".join(lines), people, ids)

    async def idle(self, timeout: float | None = None) -> bool:
        return await self.indexer.idle(timeout)

    async def close(self, *, drain: float = 10.0) -> None:
        """Finish queued indexing (at most `drain` seconds; what is left is indexed at the next
        start), then stop."""
        await self.indexer.idle(drain)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.indexer.close()
        if self.embedder is not None:
            await self.embedder.close()
        await self.index.close()


async def open_episodic(
    store: ConversationStore,
    *,
    data_dir: Path,
    counter: TokenCounter,
    embedding_model: str | None,
    api_key: str | None,
    base_url: str | None,
) -> EpisodicMemory:
    """The index next to the store, and the embedder BOT_EMBEDDING_MODEL names."""
    embedder = open_embedder(embedding_model, api_key=api_key, base_url=base_url, data_dir=data_dir)
    index = await open_memory_index(store, data_dir=data_dir)
    leases = cast(LeaseStore, store) if hasattr(store, "take_lease") else None
    return EpisodicMemory(store, index, embedder, counter, leases=leases)
