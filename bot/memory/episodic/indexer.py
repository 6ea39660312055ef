"""Indexing off the reply path, durable across restarts.

The conversation store is the queue: every session has an indexing checkpoint (the highest
message seq already indexed) in the memory index. After a turn, its session is put on an
in-process queue; a background worker reads the messages above the checkpoint, turns them into
excerpts, embeds them, writes them, then advances the checkpoint. At start, `recover()` compares
every session's last seq with its checkpoint and queues those behind, so messages written just
before a crash are indexed on restart: never lost. Entry ids are deterministic and the index
keeps the first copy of an id, so a batch written twice (a crash between the write and the
checkpoint) is still indexed once: never twice.

Indexing serves later conversations, not the reply being written, so it yields to the turns
people are waiting on (`yield_to`): a session is indexed when this process runs no turn, or
once it has waited `max_lag` seconds (10 by default), whichever comes first. Under a burst of
mentions the embedding (about 3 ms of CPU an entry with the local model) then runs after the
burst instead of queueing beside its turns; under a steady load memory is at most `max_lag`
behind. `idle()` (erasure, shutdown, tests) skips the wait.

A failing embedder does not stop indexing: entries are written without vectors and the
re-embedding pass (`reembed`) fills them in later; it also re-embeds everything when
BOT_EMBEDDING_MODEL changes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Sequence

from bot.activity import TurnActivity
from bot.embeddings.base import Embedder, EmbeddingError
from bot.keys import SessionKey, TeamKey
from bot.memory.episodic.excerpts import excerpts
from bot.memory.off_record import remembered
from bot.stores.memory_index import MemoryEntry, MemoryIndex
from bot.stores.protocols import ConversationStore, StoreUnavailable
from bot.usage.bill import billed_to, team_bill

log = logging.getLogger(__name__)

EMBED_CONTEXT = True


def embed_text(entry: MemoryEntry) -> str:
    """What is embedded: the entry, after its context when it has one."""
    if EMBED_CONTEXT and entry.context:
        return f"{entry.context}\n{entry.text}"
    return entry.text


READ_BATCH = 200  # messages read per step
CONTEXT_MESSAGES = 6  # read before a batch, for its first entry's context
EMBED_BATCH = 64
RETRY_DELAY = 5.0  # seconds before a session whose indexing failed is tried again
MAX_LAG = 10.0  # seconds a queued session waits at most for a moment without turns


class Indexer:
    def __init__(
        self,
        store: ConversationStore,
        index: MemoryIndex,
        embedder: Embedder | None,
    ) -> None:
        self.store = store
        self.index = index
        self.embedder = embedder
        # Session ids in the order they were queued, with when (time.monotonic()).
        self._queued: dict[str, float] = {}
        self._worker: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._activity: TurnActivity | None = None
        self._max_lag = MAX_LAG
        self._hurry = asyncio.Event()  # someone waits in `idle()`: no yielding until it is empty

    def yield_to(self, activity: TurnActivity, *, max_lag: float = MAX_LAG) -> None:
        """Index only when `activity` runs no turn, or after `max_lag` seconds in the queue."""
        self._activity, self._max_lag = activity, max_lag

    # --- queue --------------------------------------------------------------------------------

    def enqueue(self, session: SessionKey) -> None:
        """Index this session's new messages soon (cheap; never blocks the turn)."""
        if self._closed or session.id in self._queued:
            return
        self._queued[session.id] = time.monotonic()
        self._idle.clear()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._run(), name="episodic-indexer")

    async def recover(self) -> int:
        """Queue every session with messages above its checkpoint; returns how many."""
        heads = await self.store.session_heads()
        done = await self.index.checkpoints()
        behind = [sid for sid, seq in heads.items() if seq > done.get(sid, 0)]
        for sid in sorted(behind):
            try:
                self.enqueue(SessionKey.parse(sid))
            except ValueError:
                continue
        if behind:
            log.info("episodic_recover", extra={"fields": {"sessions": len(behind)}})
        return len(behind)

    async def idle(self, timeout: float | None = None, *, hurry: bool = True) -> bool:
        """Wait until the queue is empty (erasure, shutdown, tests, benchmarks). `hurry`: index
        what is queued now rather than at quiet moments (False: the catch-up at start, which
        only waits to re-embed after it). False on timeout."""
        if hurry and not self._idle.is_set():
            self._hurry.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        self._closed = True
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)

    async def _run(self) -> None:
        while self._queued:
            await self._turn_of(next(iter(self._queued.values())))
            sid = next(iter(self._queued))
            del self._queued[sid]
            try:
                session = SessionKey.parse(sid)
                with billed_to(team_bill(session.team_key.id)):  # the team's, not a turn's
                    await self.index_session(session)
            except asyncio.CancelledError:
                raise
            except StoreUnavailable:
                log.warning("episodic_index_unavailable", extra={"fields": {"session": sid}})
                self._retry_later(sid)
            except Exception:
                log.exception("episodic_index_failed", extra={"fields": {"session": sid}})
                self._retry_later(sid)
        self._hurry.clear()
        self._idle.set()

    async def _turn_of(self, queued_at: float) -> None:
        """Return when the session queued at `queued_at` may be indexed (see the module doc)."""
        if self._activity is None or self._hurry.is_set():
            return
        lag = self._max_lag - (time.monotonic() - queued_at)
        if lag <= 0 or self._activity.running == 0:
            return
        waits = (
            asyncio.ensure_future(self._activity.quiet(lag)),
            asyncio.ensure_future(self._hurry.wait()),
        )
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            # Wait for them to end, so nothing of the indexer outlives `close()`.
            await asyncio.gather(*waits, return_exceptions=True)

    def _retry_later(self, sid: str) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(RETRY_DELAY, lambda: self.enqueue(SessionKey.parse(sid)))

    # --- work ---------------------------------------------------------------------------------

    async def index_session(self, session: SessionKey) -> int:
        """Index every message above the session's checkpoint; returns entries written."""
        written = 0
        # The newest stored message, not the seq counter (`Store.head`): MongoDB takes a
        # message's seq before its insert lands, so a checkpoint at the counter could pass a
        # message still being written, and it would never be indexed.
        latest = await self.store.recent(session, limit=1)
        head = latest[-1].seq if latest else 0
        done = await self.index.get_checkpoint(session.id)
        while done < head:
            upto = min(done + READ_BATCH, head)
            messages = await self.store.between(session, after_seq=done, upto_seq=upto)
            if upto < head and messages:
                # A turn cut by the batch edge is indexed with the next batch, whole.
                last_turn = messages[-1].turn_id
                whole = [m for m in messages if m.turn_id != last_turn]
                messages = whole or messages
                upto = messages[-1].seq
            before = (
                await self.store.between(
                    session, after_seq=max(done - CONTEXT_MESSAGES, 0), upto_seq=done
                )
                if done > 0
                else []  # the session's first batch: nothing before it
            )
            # Said where memory was off: never an entry, nor context of one (off_record).
            entries = excerpts(session, remembered(messages), remembered(before))
            speakers = list(dict.fromkeys(p for e in entries for p in e.people))
            if speakers:
                await self.index.add_participants(session.team_key, session.id, speakers)
            await self._embed(entries)
            written += await self.index.add(entries)
            await self.index.set_checkpoint(session.id, upto)  # gaps (erased seqs) skipped too
            done = upto
        return written

    async def add_entries(self, entries: Sequence[MemoryEntry]) -> int:
        """Embed and write entries made elsewhere (session summaries, consolidated memories)."""
        batch = list(entries)
        await self._embed(batch)
        return await self.index.add(batch)

    async def _embed(self, entries: list[MemoryEntry]) -> None:
        if self.embedder is None or not entries:
            return
        try:
            for start in range(0, len(entries), EMBED_BATCH):
                chunk = entries[start : start + EMBED_BATCH]
                vectors = await self.embedder.embed([embed_text(e) for e in chunk])
                for entry, vector in zip(chunk, vectors, strict=True):
                    entry.embedder = self.embedder.name
                    entry.vector = [float(x) for x in vector]
        except EmbeddingError as exc:
            log.warning("episodic_embed_failed", extra={"fields": {"error": str(exc)[:200]}})
            for entry in entries:
                entry.embedder, entry.vector = None, None

    async def reembed(self, *, limit: int = 10_000) -> int:
        """Give every entry a vector from the current embedder (new entries whose embedding
        failed, or all of them after BOT_EMBEDDING_MODEL changed); returns how many."""
        if self.embedder is None:
            return 0
        total = 0
        while total < limit:
            batch = await self.index.missing_vectors(self.embedder.name, limit=EMBED_BATCH)
            if not batch:
                break
            try:
                vectors = await self.embedder.embed([embed_text(e) for e in batch])
            except EmbeddingError as exc:
                log.warning("episodic_reembed_failed", extra={"fields": {"error": str(exc)}})
                break
            by_team: dict[str, dict[str, list[float]]] = defaultdict(dict)
            for entry, vector in zip(batch, vectors, strict=True):
                by_team[entry.team][entry.id] = [float(x) for x in vector]
            for team_id, vecs in by_team.items():
                platform, team = team_id.split(":", 1)
                total += await self.index.set_vectors(
                    TeamKey(platform, team), self.embedder.name, vecs
                )
        if total:
            log.info("episodic_reembedded", extra={"fields": {"entries": total}})
        return total
