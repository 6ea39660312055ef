"""A message deleted or edited on the platform, applied to what the bot keeps.

DESIGN: deleting a message on the platform erases it as `/memory forget` does for its author.
For each platform message found stored (`MessageEditStore.find_platform_message`: a Slack ts
within its channel, a Discord id anywhere in the team), in this order:

1. The memory index entries drawn from it (`MemoryIndex.entries_from_sources`) are deleted with
   their vectors: the excerpt of its turn, consolidated memories citing it. First, so that a
   failure later on never leaves its words in the index.
2. Under the session lock (a turn in flight there finishes first): the message and the bot's turn
   that answered it (the messages after it with its `turn_id`: tool calls, results, the reply)
   are deleted, with those calls' tool-call logs. The session's erasure counter is bumped (a
   summary or consolidation step that read the message refuses to write what it made), pending
   consolidation work is dropped (it is extracted again from what remains), and a summary that
   covers the message is dropped with the pinned facts drawn from it; `summary_upto_seq` goes
   back to 0, so the next fold rebuilds the summary from the raw messages left. Facts drawn only
   from the deleted messages are closed (`/memory show history` lists them as closed; a fact
   citing other messages too lives on). The hot cached copy of the session is dropped.
3. Once the indexing under way has written what it read (`settle`), the index is passed again
   (anything indexed meanwhile from the message goes too) and the excerpts of the turns around
   the message are made again from what remains: the one of its own turn (if anything of it is
   left) and the next turn's, whose match-only `context` quoted it. Later turns of the session
   whose bot replies or tool-call arguments quoted the deleted words have them cut out (the
   rest kept, `bot.memory.copies`; under the lock, in step 2), and their excerpts are made
   again too. They go through the
   indexer's `add` (embedded when an embedder is configured). Consolidated memories are not
   made again (a memory mixes turns and people; the nightly run does not revisit old messages).
4. Memories recalled from a dropped entry into later messages (`meta["recalled"]`, sent again
   with those messages in later requests) are cut from them, under their sessions' locks. The
   messages of the team are read to find them (those of the entry's own place only, when it is
   a private one: it is never recalled anywhere else).
The record of messages heard where the bot is (`bot.memory.heard`) goes the same way: a
deleted message's record is removed (with one still waiting to be written), its words cut from
the bot's replies and tool-call arguments in its channel's sessions (it may have been shown to
their turns), whose excerpts are made again; an edit rewrites the record.

5. The store's and the index's files are compacted (SQLite: WAL checkpointed; `secure_delete`
   already zeroes deleted rows), and the extra tiers given (`compact_also`: the SQLite inbox,
   whose WAL held the event). A deletion of a message the bot never stored compacts those extra
   tiers only: the message may have passed through the inbox without being answered (deleted
   before its turn ran).

An edit replaces the stored text (the person's message only: `meta` is kept, with when it was
said, its audience and its files) and does the same for what was drawn from it: index entries
dropped or made again, the summary covering it dropped, recalled copies cut. The bot's reply
stays as it was and nothing is answered again. Facts taken from an edited message are kept
(`/memory forget` erases them): an edit often fixes a typo, and closing "Allergic to peanuts"
because "alergic" became "allergic" would lose what the person asked the bot to remember.

Every step is idempotent: a re-delivered delete finds nothing stored and does nothing; an
edit to the text already stored changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.core import MessageChange
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.copies import WordCutter
from bot.memory.episodic.excerpts import excerpts
from bot.memory.erasure import cut_message
from bot.memory.render import (
    RECALLED,
    RECALLED_FROM,
    RECALLED_IDS,
    RECALLED_TOKENS,
    group_turns,
    is_private_turn,
)
from bot.messages import MAX_REF_IDS, HeardMessage, MessageRef
from bot.stores.memory_index import MemoryEntry, MemoryIndex
from bot.stores.protocols import ChangeStore, LockTimeout, StaleFact, StoreUnavailable
from bot.stores.records import SessionState, StoredMessage
from bot.text import clean_text

log = logging.getLogger(__name__)

MAX_ID_CHARS = 128  # a platform message id (Slack ts, Discord snowflake) is far shorter
TURN_PAGE = 100  # messages read at a time when collecting a turn or the turns after it
CONTEXT_BACK = 40  # messages read before a re-made excerpt, for its context line
SETTLE_SECONDS = 10.0  # most a change waits for the indexing under way
SCAN_PAGE = 500  # messages per page when looking for recalled copies
STATE_TRIES = 5

LockSession = Callable[[SessionKey], AbstractAsyncContextManager[None]]
ForgetHot = Callable[[list[str]], Awaitable[None]]
AddEntries = Callable[[Sequence[MemoryEntry]], Awaitable[int]]
Settle = Callable[[float], Awaitable[bool]]
CountTokens = Callable[[str], int]


class Compactable(Protocol):
    async def compact(self) -> None: ...


class HeardChanges(Protocol):
    """The record of messages heard where the bot is (`bot.memory.heard.Hearing`)."""

    async def deleted(self, ref: MessageRef, ids: Iterable[str]) -> list[HeardMessage]: ...

    async def edited(self, ref: MessageRef, ids: Iterable[str], text: str) -> int: ...

    async def compact(self) -> None: ...


@dataclass
class _Tally:
    found: int = 0
    messages: int = 0
    rewritten: int = 0
    tool_calls: int = 0
    entries: int = 0
    rebuilt: int = 0
    summaries: int = 0
    facts: int = 0
    heard: int = 0  # records of heard messages removed or rewritten
    # session id -> seqs of the messages deleted or rewritten there
    touched: dict[str, set[int]] = field(default_factory=dict)
    turns: dict[str, set[str]] = field(default_factory=dict)  # session id -> deleted turn ids
    dropped: set[str] = field(default_factory=set)  # entry ids whose text held the words
    # Where those entries may have been recalled: their places (private entries never leave
    # theirs), or None for the whole team (a public one may be recalled in DMs too).
    recalled_in: set[str | None] = field(default_factory=set)

    def result(self, *, failed: bool = False) -> MessageChange:
        return MessageChange(
            found=self.found,
            messages=self.messages,
            rewritten=self.rewritten,
            tool_calls=self.tool_calls,
            entries=self.entries,
            rebuilt=self.rebuilt,
            summaries=self.summaries,
            facts=self.facts,
            heard=self.heard,
            failed=failed,
        )


@dataclass(frozen=True)
class _Target:
    """A platform message as the store holds it (the person's message)."""

    team: TeamKey
    ids: tuple[str, ...]
    channel: str | None


class PlatformChanges:
    """Applies platform deletes and edits (see the module doc). `index`, `add`, `settle` and
    `compact_also` are set when the app attaches its memory index (`BotApp.attach_memory_tier`);
    without an index only the store is changed."""

    def __init__(
        self,
        store: ChangeStore,
        *,
        lock_session: LockSession | None = None,
        forget_hot: ForgetHot | None = None,
        count_tokens: CountTokens | None = None,
        max_chars: int = 20_000,
    ) -> None:
        self.store = store
        self.lock_session = lock_session
        self.forget_hot = forget_hot
        self.count_tokens = count_tokens or (lambda text: max(1, len(text) // 4))
        self.max_chars = max_chars
        self.index: MemoryIndex | None = None
        self.add: AddEntries | None = None
        self.settle: Settle | None = None
        self.compact_also: list[Compactable] = []
        self.heard: HeardChanges | None = None  # the record of heard messages, when kept

    # --- entry points ------------------------------------------------------------------------

    async def deleted(self, ref: MessageRef) -> MessageChange:
        return await self._apply(ref, None)

    async def edited(self, ref: MessageRef, text: str) -> MessageChange:
        if not isinstance(text, str):
            log.warning("platform_change_refused", extra={"fields": {"why": "text"}})
            return MessageChange()
        text = clean_text(text)
        if len(text) > self.max_chars:
            text = text[: self.max_chars] + "\n…[message too long: the rest was cut]"
        return await self._apply(ref, text)

    async def _apply(self, ref: MessageRef, text: str | None) -> MessageChange:
        kind = "deleted" if text is None else "edited"
        target = _target(ref)
        if target is None:
            log.warning("platform_change_refused", extra={"fields": {"kind": kind}})
            return MessageChange()
        tally = _Tally()
        failed = False
        try:
            await self._run(ref, target, text, tally)
        except (StoreUnavailable, LockTimeout) as exc:
            failed = True
            log.warning(
                "platform_change_failed",
                extra={"fields": {"kind": kind, "error": type(exc).__name__}},
            )
        except Exception:
            failed = True
            log.exception("platform_change_crashed", extra={"fields": {"kind": kind}})
        result = tally.result(failed=failed)
        log.info(
            "platform_message_" + kind,
            extra={
                "fields": {
                    "team": target.team.id,
                    "channel": target.channel,
                    "thread": ref.thread,
                    "ids": len(target.ids),
                    **{k: v for k, v in vars(tally).items() if isinstance(v, int)},
                    "failed": failed,
                }
            },
        )
        return result

    async def _run(self, ref: MessageRef, target: _Target, text: str | None, tally: _Tally) -> None:
        found = await self._find(target)
        tally.found = sum(len(ms) for ms in found.values())
        if text is not None:  # an edit to the words already stored changes nothing
            found = {
                sid: changed
                for sid, ms in found.items()
                if (changed := [m for m in ms if _edited_content(m, text) != m.content])
            }
        heard = await self._heard_change(ref, target, text, tally)
        heard_tier: list[Compactable] = [self.heard] if self.heard is not None else []
        if not found and not heard:
            if text is None:  # the words may still be in the inbox they came through
                await self._compact([*self.compact_also, *heard_tier])
            return
        # 1. What the index drew from these messages goes first (see the module doc).
        sources = [_source(m) for ms in found.values() for m in ms]
        await self._drop_entries(target.team, sources, tally)
        # 2. The store, one session at a time under its lock.
        for session_id in sorted(found):
            key = SessionKey.parse(session_id)
            async with self._locked(key):
                if text is None:
                    await self._delete_in(key, target, tally)
                else:
                    await self._edit_in(key, target, text, tally)
                if self.forget_hot is not None:
                    await self.forget_hot([session_id])
        if heard:
            await self._cut_heard(target.team, heard, tally)
        if not tally.touched:
            await self._compact([*self.compact_also, *heard_tier])
            return
        # 3. The index again, after the indexing under way, and the excerpts around.
        if self.index is not None:
            if self.settle is not None:
                await self.settle(SETTLE_SECONDS)
            for session_id, seqs in sorted(tally.touched.items()):
                key = SessionKey.parse(session_id)
                again = [f"{session_id}#{s}" for s in sorted(seqs)]
                await self._drop_entries(target.team, again, tally)
                await self._remake(key, seqs, tally.turns.get(session_id, set()), tally)
            # 4. Recalled copies of the dropped entries in later messages.
            if tally.dropped:
                places = sorted(p for p in tally.recalled_in if p is not None)
                wide = None in tally.recalled_in
                deleted = [m for ms in found.values() for m in ms] if text is None else []
                for prefix in [""] if wide else [p + ":" for p in places]:
                    await self._cut_recalled(target.team, tally.dropped, prefix, deleted, tally)
        # 5. Files.
        tiers: list[Compactable] = [self.store, *([self.index] if self.index else [])]
        await self._compact([*tiers, *self.compact_also, *heard_tier])

    # --- heard messages (`bot.memory.heard`) ---------------------------------------------------

    async def _heard_change(
        self, ref: MessageRef, target: _Target, text: str | None, tally: _Tally
    ) -> list[HeardMessage]:
        """The record of the messages heard: removed (returned, their words are cut from the
        replies that quoted them) or rewritten."""
        if self.heard is None:
            return []
        if text is not None:
            tally.heard += await self.heard.edited(ref, target.ids, text)
            return []
        gone = await self.heard.deleted(ref, target.ids)
        tally.heard += len(gone)
        return gone

    async def _cut_heard(self, team: TeamKey, gone: list[HeardMessage], tally: _Tally) -> None:
        """A deleted message the bot heard may have been shown to turns in its channel (its
        thread's, or those of mentions at the channel's top level), and the bot repeats what it
        was given: its words are cut from the bot's replies and tool-call arguments in the
        channel's sessions, under their locks (the rest kept, people's own words untouched);
        the excerpts of the turns changed are made again (step 3)."""
        cutter = WordCutter.of(r.text for r in gone)
        if not cutter:
            return
        for prefix in sorted({f"{team.id}:{r.channel}:" for r in gone}):
            hits: dict[str, int] = {}
            cursor: tuple[str, int] = (prefix, 0)
            while True:
                page = await self.store.team_messages(team, after=cursor, limit=SCAN_PAGE)
                mine = [m for m in page if m.session.startswith(prefix)]
                for m in mine:
                    own = m.role == "user" and not m.from_tool
                    if cut_message(m, cutter, None, keep_text=own) is not None:
                        hits[m.session] = min(hits.get(m.session, m.seq), m.seq)
                if len(mine) < SCAN_PAGE:
                    break
                cursor = (page[-1].session, page[-1].seq)
            for session_id, first in sorted(hits.items()):
                key = SessionKey.parse(session_id)
                async with self._locked(key):
                    changed = await self._cut_quotes(key, cutter, first - 1)
                    if self.forget_hot is not None:
                        await self.forget_hot([session_id])
                tally.rewritten += len(changed)
                tally.touched.setdefault(session_id, set()).update(changed)

    # --- finding -----------------------------------------------------------------------------

    async def _find(self, target: _Target) -> dict[str, list[StoredMessage]]:
        """The person's messages stored under these platform ids, by session."""
        found: dict[str, list[StoredMessage]] = {}
        for message_id in target.ids:
            for m in await self.store.find_platform_message(
                target.team, message_id, channel=target.channel
            ):
                if m.role == "user" and _session_ok(m.session, target.team):
                    found.setdefault(m.session, []).append(m)
        return found

    async def _refind(self, key: SessionKey, target: _Target) -> list[StoredMessage]:
        """Within the lock: what is stored now (a turn that just finished stored more)."""
        found = await self._find(target)
        return sorted(found.get(key.id, []), key=lambda m: m.seq)

    # --- delete ------------------------------------------------------------------------------

    async def _delete_in(self, key: SessionKey, target: _Target, tally: _Tally) -> None:
        messages = await self._refind(key, target)
        if not messages:
            return
        doomed = await self._with_turns(key, messages)
        seqs = sorted(m.seq for m in doomed)
        calls = sorted(
            {str(m.meta["call_id"]) for m in doomed if m.role == "tool" and m.meta.get("call_id")}
        )
        tally.summaries += await self._scrub_state(key, min(seqs))
        tally.facts += await self._close_facts(key, doomed)
        tally.messages += await self.store.delete_messages(key, seqs)
        tally.tool_calls += await self.store.delete_tool_calls(key, calls)
        tally.touched.setdefault(key.id, set()).update(seqs)
        cutter = WordCutter.of(m.content for m in messages)
        tally.touched[key.id].update(await self._cut_quotes(key, cutter, min(seqs)))
        tally.turns.setdefault(key.id, set()).update(m.turn_id for m in messages)

    async def _cut_quotes(self, key: SessionKey, cutter: WordCutter, after: int) -> set[int]:
        """The deleted words where later turns of the session quote them (the bot repeats what
        it was given: its replies, its tool-call arguments), cut out with the rest kept
        (`bot.memory.copies`); people's own messages stay as they typed them. Returns the
        seqs of the person's messages of the turns changed (their excerpts are made again)."""
        if not cutter:
            return set()
        head, _ = await self.store.head(key)
        edited: list[StoredMessage] = []
        asked: dict[str, int] = {}
        cursor = after
        while cursor < head:
            upto = min(cursor + TURN_PAGE, head)
            for m in await self.store.between(key, after_seq=cursor, upto_seq=upto):
                own = m.role == "user" and not m.from_tool
                if own:
                    asked.setdefault(m.turn_id, m.seq)
                cut = cut_message(m, cutter, None, keep_text=own)
                if cut is not None:
                    edited.append(cut)
            cursor = upto
        if edited:
            await self.store.rewrite_messages(edited)
        return {asked[m.turn_id] for m in edited if m.turn_id in asked}

    async def _with_turns(
        self, key: SessionKey, messages: list[StoredMessage]
    ) -> list[StoredMessage]:
        """These messages and what followed each in its turn (the bot's reply, tool calls and
        results): the messages after it sharing its `turn_id`, up to the first that does not
        (a session runs one turn at a time, so a turn's messages are consecutive)."""
        head, _ = await self.store.head(key)
        out: dict[int, StoredMessage] = {}
        for first in messages:
            out[first.seq] = first
            cursor, done = first.seq, False
            while not done and cursor < head:
                upto = min(cursor + TURN_PAGE, head)
                for m in await self.store.between(key, after_seq=cursor, upto_seq=upto):
                    if m.turn_id != first.turn_id:
                        done = True
                        break
                    out[m.seq] = m
                cursor = upto
        return [out[s] for s in sorted(out)]

    async def _close_facts(self, key: SessionKey, doomed: list[StoredMessage]) -> int:
        """Close the live facts drawn only from these messages (of their speakers)."""
        refs = {_source(m) for m in doomed}
        turns = {m.turn_id for m in doomed}
        closed = 0
        for speaker in sorted({m.speaker for m in doomed}):
            try:
                person = PersonKey.parse(speaker)
            except ValueError:
                continue
            for fact in await self.store.list_facts(person):
                sources = set(fact.source_messages)
                only_these = bool(sources) and sources <= refs
                # A fact stored before facts named their messages: its turn, in this session.
                old_style = not sources and fact.session == key.id and fact.source_ref in turns
                if not (only_these or old_style):
                    continue
                with contextlib.suppress(StaleFact):  # closed meanwhile: nothing to do
                    await self.store.replace_fact(person, fact.id, None)
                    closed += 1
        return closed

    # --- edit --------------------------------------------------------------------------------

    async def _edit_in(self, key: SessionKey, target: _Target, text: str, tally: _Tally) -> None:
        messages = await self._refind(key, target)
        changed = []
        for m in messages:
            content = _edited_content(m, text)
            if content == m.content:
                continue
            changed.append(
                m.model_copy(update={"content": content, "tokens": self.count_tokens(content)})
            )
        if not changed:
            return
        tally.summaries += await self._scrub_state(key, min(m.seq for m in changed))
        tally.rewritten += await self.store.rewrite_messages(changed)
        tally.touched.setdefault(key.id, set()).update(m.seq for m in changed)

    # --- session state -----------------------------------------------------------------------

    async def _scrub_state(self, key: SessionKey, first_seq: int) -> int:
        """Bump the erasure counter, drop pending consolidation work, and drop the summary if it
        covers `first_seq` (rebuilt from the raw messages by the next fold). 1 if dropped."""
        for _ in range(STATE_TRIES):  # optimistic concurrency: re-read on conflict
            state = await self.store.get_state(key) or SessionState(session=key.id)
            state.erasures += 1
            state.consolidation = None
            dropped = 0
            if state.summary_upto_seq >= first_seq:
                dropped = int(bool(state.summary or state.pinned))
                state.summary = ""
                state.summary_speakers = []
                # Pinned facts name the end of the fold they came from: those of folds that
                # ended before the message never saw it.
                state.pinned = [p for p in state.pinned if 0 < p.seq < first_seq]
                state.summary_upto_seq = 0
            if await self.store.put_state(key, state):
                return dropped
        raise RuntimeError(f"session state of {key.id} kept changing during a platform change")

    # --- index -------------------------------------------------------------------------------

    async def _drop_entries(self, team: TeamKey, sources: list[str], tally: _Tally) -> None:
        if self.index is None or not sources:
            return
        old = await self.index.entries_from_sources(team, sources)
        if not old:
            return
        ids = [e.id for e in old]
        tally.dropped.update(ids)
        tally.recalled_in.update(e.place if e.private else None for e in old)
        tally.entries += await self.index.delete_entries(team, ids)

    async def _remake(
        self, key: SessionKey, seqs: set[int], turns: set[str], tally: _Tally
    ) -> None:
        """Make again the excerpts of the turns around the touched messages, from the store."""
        assert self.index is not None
        checkpoint = await self.index.get_checkpoint(key.id)
        fresh: dict[str, MemoryEntry] = {}
        covered = 0
        for seq in sorted(seqs):
            if seq > checkpoint:
                break  # not indexed yet: the indexer makes these from the store as it is now
            if seq <= covered:
                continue
            before, window, covered = await self._window(key, seq, checkpoint, turns)
            for entry in excerpts(key, window, before):
                fresh[entry.id] = entry
        if not fresh:
            return
        await self.index.delete_entries(key.team_key, sorted(fresh))
        add = self.add or self.index.add
        tally.rebuilt += await add(list(fresh.values()))
        tally.entries -= len(tally.dropped & set(fresh))  # made again: not lost after all

    async def _window(
        self, key: SessionKey, seq: int, checkpoint: int, turns: set[str]
    ) -> tuple[list[StoredMessage], list[StoredMessage], int]:
        """The messages whose excerpts change when message `seq` changed: its turn (what is
        left of it) through the next turn in which someone said something (its context quoted
        `seq`), within the indexed part; the messages before them (context of the first); and
        the last seq the window covers."""
        before = await self.store.between(
            key, after_seq=max(seq - 1 - CONTEXT_BACK, 0), upto_seq=seq - 1
        )
        window: list[StoredMessage] = []
        cursor = seq - 1
        covered = checkpoint
        while cursor < checkpoint:
            upto = min(cursor + TURN_PAGE, checkpoint)
            window.extend(await self.store.between(key, after_seq=cursor, upto_seq=upto))
            cursor = upto
            end = _through_next_said(window, seq, complete=cursor >= checkpoint)
            if end is not None:
                window = window[:end]
                covered = window[-1].seq if window else seq
                break
        # The turn the window starts in, whole (its earlier messages are in `before`).
        lead = set(turns) | ({window[0].turn_id} if window else set())
        while before and before[-1].turn_id in lead:
            window.insert(0, before.pop())
        return before, window, covered

    async def _cut_recalled(
        self,
        team: TeamKey,
        dropped: set[str],
        prefix: str,
        deleted: list[StoredMessage],
        tally: _Tally,
    ) -> None:
        """Cut the memories recalled from dropped entries out of the messages they were sent
        with (each message keeps them in `meta` and sends them again in later requests), in the
        team's sessions whose id starts with `prefix` ("" for all of them). For a deletion,
        the bot's replies from there on in those sessions (a model repeats what was recalled
        for it) have the `deleted` words cut too, and their excerpts are made again."""
        hits: dict[str, list[int]] = {}
        cursor: tuple[str, int] = (prefix, 0)
        while True:
            page = await self.store.team_messages(team, after=cursor, limit=SCAN_PAGE)
            mine = [m for m in page if m.session.startswith(prefix)]
            for m in mine:
                ids = m.meta.get(RECALLED_IDS)
                if isinstance(ids, list) and dropped.intersection(str(i) for i in ids):
                    hits.setdefault(m.session, []).append(m.seq)
            if len(mine) < SCAN_PAGE:
                break  # the last page, or past the sessions of `prefix` (pages are in order)
            cursor = (page[-1].session, page[-1].seq)
        for session_id, seqs in sorted(hits.items()):
            key = SessionKey.parse(session_id)
            async with self._locked(key):
                current = await self.store.between(key, after_seq=min(seqs) - 1, upto_seq=max(seqs))
                wanted = set(seqs)
                cut = [
                    m.model_copy(update={"meta": meta})
                    for m in current
                    if m.seq in wanted
                    and (meta := _without_recalled(m.meta, dropped, self.count_tokens)) != m.meta
                ]
                await self.store.rewrite_messages(cut)
                cutter = WordCutter.of(m.content for m in deleted)
                quoted = await self._cut_quotes(key, cutter, min(seqs) - 1) if deleted else set()
                if self.forget_hot is not None:
                    await self.forget_hot([session_id])
            if quoted and self.index is not None:
                if self.settle is not None:
                    await self.settle(SETTLE_SECONDS)
                await self._drop_entries(team, [f"{session_id}#{q}" for q in sorted(quoted)], tally)
                await self._remake(key, quoted, set(), tally)

    # --- files -------------------------------------------------------------------------------

    async def _compact(self, tiers: Sequence[Compactable]) -> None:
        for tier in tiers:
            try:
                await tier.compact()
            except Exception as exc:  # a reader held the WAL: the next compaction empties it
                log.warning(
                    "platform_change_compact_failed",
                    extra={"fields": {"error": type(exc).__name__}},
                )

    def _locked(self, key: SessionKey) -> AbstractAsyncContextManager[None]:
        return self.lock_session(key) if self.lock_session else contextlib.nullcontext()


# --- helpers ---------------------------------------------------------------------------------


def _target(ref: MessageRef) -> _Target | None:
    """The checked form of a ref; None for a ref that names nothing usable."""
    try:
        team = TeamKey(ref.platform, ref.team)
        if ref.channel is not None:
            SessionKey(ref.platform, ref.team, ref.channel)  # the same rules as a session part
    except (ValueError, TypeError, AttributeError):
        return None
    raw = ref.message_ids if isinstance(ref.message_ids, (tuple, list)) else ()
    ids = [i.strip() for i in raw if isinstance(i, str) and 0 < len(i.strip()) <= MAX_ID_CHARS]
    ids = list(dict.fromkeys(ids))
    if len(ids) > MAX_REF_IDS:
        log.warning(
            "platform_change_capped", extra={"fields": {"ids": len(ids), "kept": MAX_REF_IDS}}
        )
        ids = ids[:MAX_REF_IDS]
    if not ids:
        return None
    return _Target(team, tuple(ids), ref.channel)


def _session_ok(session_id: str, team: TeamKey) -> bool:
    try:
        return SessionKey.parse(session_id).team_key == team
    except ValueError:
        return False


def _source(m: StoredMessage) -> str:
    return f"{m.session}#{m.seq}"


_FILE_BLOCKS = ("\n\n[file: ", "\n\n[image: ")


def _edited_content(m: StoredMessage, text: str) -> str:
    """The stored content with the person's words replaced by `text`; the notes of the files
    shared with the message (`meta["files"]`, after the words) are kept."""
    if not m.meta.get("files"):
        return text
    content = m.content
    if content.startswith(("[file: ", "[image: ")):
        blocks = content
    else:
        starts = [i for i in (content.find(b) for b in _FILE_BLOCKS) if i >= 0]
        blocks = content[min(starts) + 2 :] if starts else ""
    if not blocks:
        return text
    return "\n\n".join([text.strip(), blocks]) if text.strip() else blocks


def _said(group: list[StoredMessage]) -> bool:
    return any(m.role == "user" and m.content.strip() and not m.from_tool for m in group)


def _through_next_said(window: list[StoredMessage], seq: int, *, complete: bool) -> int | None:
    """How many messages of `window` reach through the end of the first turn after `seq` in
    which someone said something (not a private turn); None when that turn may go on past the
    window (read more), `len(window)` when the window is all there is (`complete`)."""
    groups = group_turns(window)
    end = 0
    for i, group in enumerate(groups):
        end += len(group)
        if group[0].seq > seq and not is_private_turn(group) and _said(group):
            if i < len(groups) - 1 or complete:
                return end
            return None
    return len(window) if complete else None


def _without_recalled(
    meta: dict[str, Any], dropped: set[str], count_tokens: CountTokens
) -> dict[str, Any]:
    """`meta` with the recalled memories drawn from dropped entries cut (the others kept)."""
    out = dict(meta)
    text, ids = meta.get(RECALLED), meta.get(RECALLED_IDS)
    lines = text.split("\n") if isinstance(text, str) else []
    ids = [str(i) for i in ids] if isinstance(ids, list) else []
    header, body = (lines[0], lines[1:]) if lines else ("", [])
    kept = (
        [(line, i) for line, i in zip(body, ids, strict=True) if i not in dropped]
        if len(body) == len(ids)
        else []  # not one line per memory: drop the block rather than guess
    )
    if not kept:
        for name in (RECALLED, RECALLED_FROM, RECALLED_TOKENS, RECALLED_IDS):
            out.pop(name, None)
        return out
    recalled = "\n".join([header, *(line for line, _ in kept)])
    out[RECALLED] = recalled
    out[RECALLED_IDS] = [i for _, i in kept]
    out[RECALLED_TOKENS] = count_tokens(recalled)
    return out
